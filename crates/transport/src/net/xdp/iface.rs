//! What the xdp driver needs to know about its interface: index, Ethernet address, IPv4
//! addresses and receive queues, read from the kernel (`getifaddrs`, sysfs).

use std::ffi::{CStr, CString};
use std::io;
use std::net::Ipv4Addr;

/// An interface as the xdp driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    pub addrs: Vec<Ipv4Addr>,
}

impl Interface {
    /// Looks `name` up; `Ok(None)` when no interface has that name.
    pub fn find(name: &str) -> io::Result<Option<Interface>> {
        let Ok(cname) = CString::new(name) else {
            return Ok(None);
        };
        // SAFETY: `cname` is a valid NUL-terminated string for the call.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if index == 0 {
            return Ok(None);
        }
        let mut iface = Interface {
            name: name.to_string(),
            index,
            mac: [0; 6],
            addrs: Vec::new(),
        };
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cur = head;
        while !cur.is_null() {
            // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs;
            // its name is a NUL-terminated string and its address, when not null, a sockaddr
            // of the family it states (sockaddr_in for AF_INET, sockaddr_ll for AF_PACKET).
            unsafe {
                let ifa = &*cur;
                let same = !ifa.ifa_name.is_null()
                    && CStr::from_ptr(ifa.ifa_name).to_bytes() == name.as_bytes();
                if same && !ifa.ifa_addr.is_null() {
                    match i32::from((*ifa.ifa_addr).sa_family) {
                        libc::AF_INET => {
                            let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                            iface
                                .addrs
                                .push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
                        }
                        libc::AF_PACKET => {
                            let sll = &*ifa.ifa_addr.cast::<libc::sockaddr_ll>();
                            if sll.sll_halen == 6 {
                                iface.mac.copy_from_slice(&sll.sll_addr[..6]);
                            }
                        }
                        _ => {}
                    }
                }
                cur = ifa.ifa_next;
            }
        }
        // SAFETY: `head` came from getifaddrs and is freed once.
        unsafe { libc::freeifaddrs(head) };
        Ok(Some(iface))
    }
}

/// Every interface name of this thread's network namespace, for an error that names the
/// choices (`if_nameindex` asks the kernel; sysfs would show the mount's namespace).
pub fn names() -> Vec<String> {
    let mut v = Vec::new();
    // SAFETY: if_nameindex returns an array ended by a zero entry, freed below once.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return v;
    }
    let mut p = list;
    // SAFETY: every entry up to the zero one is valid, with a NUL-terminated name.
    unsafe {
        while (*p).if_index != 0 {
            v.push(CStr::from_ptr((*p).if_name).to_string_lossy().into_owned());
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_with_its_address_and_a_missing_name_is_none() {
        let lo = Interface::find("lo")
            .unwrap()
            .expect("every namespace has lo");
        assert!(lo.index > 0);
        assert!(lo.addrs.contains(&Ipv4Addr::LOCALHOST), "{lo:?}");
        assert_eq!(Interface::find("no-such-if0").unwrap(), None);
        assert!(names().contains(&"lo".to_string()));
    }
}
