//! DIRECTORY (0x19): the services a distributor carries, their state and whether the client
//! may open them (distributor → client, version 2).
//!
//! ```text
//!  0  header (item_id 0; flags: 0x01 COMPLETE: every service, else the ones that changed)
//!  8  u16 count          1 or more services
//! 10  u16 reserved (0)
//! 12  `count` entries, exactly to `length`, each:
//!       u8 state          0 down (no provider), 1 up
//!       u8 flags          0x01 OPEN: the client may open it
//!       u8 name_len       1 to 64
//!       name bytes
//! ```
//!
//! The distributor sends the complete directory after a version 2 login, then one entry per
//! service whose state changes (a service whose provider went away is `down`: its items went
//! stale in one group STATUS, and come back with fresh REFRESHes when it is `up` again).

use super::header::{check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u16, write_u16, MdError};
use crate::model::{check_service, MAX_SERVICE_LEN};

/// Field ranges of DIRECTORY after the header.
pub mod field {
    use crate::codec::Range;
    pub const COUNT: Range = 8..10;
    pub const RESERVED: Range = 10..12;
    /// Start of the entries.
    pub const ENTRIES: usize = 12;
}

/// The flags of DIRECTORY.
pub mod directory_flags {
    /// Every service the distributor carries (else only those that changed).
    pub const COMPLETE: u8 = 0x01;
}

/// The flags of one entry.
pub mod service_flags {
    /// The client may open the service.
    pub const OPEN: u8 = 0x01;
}

/// Length of the fixed part of a DIRECTORY.
pub const DIRECTORY_HEADER_LEN: usize = field::ENTRIES;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Directory,
    fixed_len: DIRECTORY_HEADER_LEN,
    flags: directory_flags::COMPLETE,
    item_id: ItemIdRule::Zero,
    flags_field: "directory.flags",
    item_id_field: "directory.item_id",
};

/// One service of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServiceEntry<'a> {
    pub name: &'a str,
    /// A provider of it is live.
    pub up: bool,
    /// The client may open it.
    pub open: bool,
}

/// The entries of a DIRECTORY: as they lie in a parsed message, or a slice a sender built.
#[derive(Debug, Clone, Copy)]
pub enum EntryList<'a> {
    /// `count` checked entries (only the codec makes one).
    Wire {
        count: u16,
        bytes: &'a [u8],
    },
    List(&'a [ServiceEntry<'a>]),
}

impl<'a> EntryList<'a> {
    pub fn len(&self) -> usize {
        match self {
            EntryList::Wire { count, .. } => usize::from(*count),
            EntryList::List(l) => l.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = ServiceEntry<'a>> + 'a {
        let (mut rest, list): (&'a [u8], &'a [ServiceEntry<'a>]) = match *self {
            EntryList::Wire { bytes, .. } => (bytes, &[]),
            EntryList::List(l) => (&[], l),
        };
        let wire = std::iter::from_fn(move || {
            let (e, tail) = entry(rest).ok()?;
            rest = tail;
            Some(e)
        });
        wire.chain(list.iter().copied())
    }
    fn encoded_len(&self) -> usize {
        match self {
            EntryList::Wire { bytes, .. } => bytes.len(),
            EntryList::List(l) => l.iter().map(|e| 3 + e.name.len()).sum(),
        }
    }
}

impl PartialEq for EntryList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for EntryList<'_> {}

/// Decodes one entry at the start of `b`; returns it and what follows.
fn entry(b: &[u8]) -> Result<(ServiceEntry<'_>, &[u8]), MdError> {
    let Some((&[state, flags, len], rest)) = b.split_first_chunk::<3>() else {
        return Err(MdError::BadLength {
            length: 0,
            reason: "a directory entry runs past the end of the message",
        });
    };
    if state > 1 {
        return Err(MdError::BadField {
            field: "directory.state",
            value: state.into(),
        });
    }
    if flags & !service_flags::OPEN != 0 {
        return Err(MdError::BadField {
            field: "directory.service_flags",
            value: flags.into(),
        });
    }
    let len = usize::from(len);
    if len == 0 || len > MAX_SERVICE_LEN {
        return Err(MdError::BadField {
            field: "directory.name_len",
            value: len as u64,
        });
    }
    let Some((name, rest)) = rest.split_at_checked(len) else {
        return Err(MdError::BadLength {
            length: 0,
            reason: "a directory entry runs past the end of the message",
        });
    };
    let name = check_service(name)
        .map_err(|e| super::name_error("directory.name_len", "directory.name", e))?;
    Ok((
        ServiceEntry {
            name,
            up: state == 1,
            open: flags & service_flags::OPEN != 0,
        },
        rest,
    ))
}

/// Checks a DIRECTORY and returns its entries.
fn parts(b: &[u8]) -> Result<EntryList<'_>, MdError> {
    let len = check_typed(b, &RULES)?;
    let count = read_u16(b, field::COUNT);
    if count == 0 {
        return Err(MdError::BadField {
            field: "directory.count",
            value: 0,
        });
    }
    super::check_zero("directory.reserved", read_u16(b, field::RESERVED).into())?;
    let bytes = &b[field::ENTRIES..len];
    let mut rest = bytes;
    for _ in 0..count {
        rest = entry(rest)
            .map_err(|e| match e {
                MdError::BadLength { reason, .. } => MdError::BadLength {
                    length: len as u16,
                    reason,
                },
                other => other,
            })?
            .1;
    }
    if !rest.is_empty() {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "bytes follow the last directory entry",
        });
    }
    Ok(EntryList::Wire { count, bytes })
}

/// A checked view of a DIRECTORY.
#[derive(Debug, Clone, Copy)]
pub struct DirectoryView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DirectoryView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        DirectoryView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = DirectoryView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks the header, type DIRECTORY, `length >= 12`, no flag but COMPLETE, `item_id` 0,
    /// `count >= 1`, reserved 0, then each entry: state 0 or 1, no flag but OPEN, a name of 1
    /// to 64 bytes of the service alphabet, all within `length`; then that nothing follows.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// The parsed form of a DIRECTORY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryRepr<'a> {
    /// Every service (else the ones that changed).
    pub complete: bool,
    pub services: EntryList<'a>,
}

impl<'a> DirectoryRepr<'a> {
    /// Parses a DIRECTORY, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &DirectoryView<&'a T>) -> Result<Self, MdError> {
        let b: &'a [u8] = view.buffer.as_ref();
        let services = parts(b)?;
        Ok(DirectoryRepr {
            complete: b[super::header::field::FLAGS] & directory_flags::COMPLETE != 0,
            services,
        })
    }

    /// Checks what a receiver would reject: no service, a name out of its alphabet, a message
    /// over 64 KiB.
    pub fn check(&self) -> Result<(), MdError> {
        if self.services.is_empty() || self.services.len() > usize::from(u16::MAX) {
            return Err(MdError::BadField {
                field: "directory.count",
                value: self.services.len() as u64,
            });
        }
        for e in self.services.iter() {
            check_service(e.name.as_bytes())
                .map_err(|err| super::name_error("directory.name_len", "directory.name", err))?;
        }
        if self.buffer_len() > super::MAX_MESSAGE_LEN {
            return Err(MdError::BadField {
                field: "directory.length",
                value: self.buffer_len() as u64,
            });
        }
        Ok(())
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        DIRECTORY_HEADER_LEN + self.services.encoded_len()
    }

    /// Writes every byte of the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), or a length does not
    /// fit its field (see [`check`](Self::check)).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut DirectoryView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        let flags = if self.complete {
            directory_flags::COMPLETE
        } else {
            0
        };
        emit_header(b, MessageType::Directory, flags, 0, len);
        let count = u16::try_from(self.services.len()).expect("at most 65535 services");
        write_u16(b, field::COUNT, count);
        write_u16(b, field::RESERVED, 0);
        let mut at = field::ENTRIES;
        for e in self.services.iter() {
            b[at] = u8::from(e.up);
            b[at + 1] = if e.open { service_flags::OPEN } else { 0 };
            b[at + 2] = u8::try_from(e.name.len()).expect("a name of at most 255 bytes");
            b[at + 3..at + 3 + e.name.len()].copy_from_slice(e.name.as_bytes());
            at += 3 + e.name.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_checks_each_entry() {
        let entries = [
            ServiceEntry {
                name: "FEED1",
                up: true,
                open: true,
            },
            ServiceEntry {
                name: "FX",
                up: false,
                open: false,
            },
        ];
        let repr = DirectoryRepr {
            complete: true,
            services: EntryList::List(&entries),
        };
        let mut b = vec![0xa5u8; repr.buffer_len()];
        repr.emit(&mut DirectoryView::new_unchecked(&mut b[..]));
        assert_eq!(
            b,
            [
                25, 0, 0x19, 1, 0, 0, 0, 0, 2, 0, 0, 0, // header, 2 services
                1, 1, 5, b'F', b'E', b'E', b'D', b'1', // up, may open
                0, 0, 2, b'F', b'X', // down, may not
            ]
        );
        let view = DirectoryView::new_checked(&b[..]).unwrap();
        assert_eq!(DirectoryRepr::parse(&view).unwrap(), repr);
        let mut bad = b.clone();
        bad[12] = 2;
        assert_eq!(
            DirectoryView::new_checked(&bad[..]).unwrap_err(),
            MdError::BadField {
                field: "directory.state",
                value: 2
            }
        );
        let mut short = b.clone();
        short[8] = 3;
        assert!(matches!(
            DirectoryView::new_checked(&short[..]).unwrap_err(),
            MdError::BadLength { length: 25, .. }
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x19)) {
            if let Ok(view) = DirectoryView::new_checked(&bytes[..]) {
                let repr = DirectoryRepr::parse(&view).unwrap();
                prop_assert!(repr.check().is_ok());
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut DirectoryView::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
            }
        }
    }
}
