//! POST (0x1C): a contribution to an item of a service (client → distributor → provider,
//! version 2).
//!
//! ```text
//!  0  header (item_id 0; flags: 0x01 REFRESH: a full image (a new item), else an UPDATE)
//!  8  u64 origin         0 from a client; on the backbone the distributor's id (not 0)
//! 16  u32 post_id        the poster's id for it (not 0): the client's, on the backbone the
//!                        distributor's
//! 20  u16 field_count
//! 22  u8  service_len    1 to 64
//! 23  u8  name_len       1 to 128
//! 24  u8  user_len       0 from a client; on the backbone the posting user's, 1 to 64
//! 25  3 bytes reserved (0)
//! 28  service bytes, name bytes, user bytes, then zero padding so the fields start at a
//!     multiple of 8 from the start of the message
//!  …  fields, exactly to `length`
//! ```
//!
//! `origin` and `user_len` are both 0 (a client's post) or both set (the distributor's
//! forward, on the service's request topic `md.<service>.req`). The provider answers every
//! post with an [`ACK`](super::ack) carrying the same `origin` and `post_id` on the service's
//! backbone topic; the distributor answers its client with the client's `post_id`.

use super::fields::WireFields;
use super::header::{check_typed, emit_header, ItemIdRule, MessageType, TypeRules};
use super::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64, FieldList, MdError};
use crate::model::{
    check_item_name, check_service, check_user, MAX_ITEM_NAME_LEN, MAX_SERVICE_LEN, MAX_USER_LEN,
};

/// Field ranges of POST after the header.
pub mod field {
    use crate::codec::Range;
    pub const ORIGIN: Range = 8..16;
    pub const POST_ID: Range = 16..20;
    pub const FIELD_COUNT: Range = 20..22;
    pub const SERVICE_LEN: usize = 22;
    pub const NAME_LEN: usize = 23;
    pub const USER_LEN: usize = 24;
    pub const RESERVED: Range = 25..28;
    /// Start of the service bytes; the name and the user follow them.
    pub const NAMES: usize = 28;
}

/// The flag bits of POST.
pub mod post_flags {
    /// A full image (a new item, or a new image of one), else the fields that changed.
    pub const REFRESH: u8 = 0x01;
}

/// Length of the fixed part of a POST.
pub const POST_HEADER_LEN: usize = field::NAMES;

const RULES: TypeRules = TypeRules {
    ty: MessageType::Post,
    fixed_len: POST_HEADER_LEN,
    flags: post_flags::REFRESH,
    item_id: ItemIdRule::Zero,
    flags_field: "post.flags",
    item_id_field: "post.item_id",
};

/// Where the fields start for names of these lengths: after the names, padded to 8.
pub const fn fields_offset(service_len: usize, name_len: usize, user_len: usize) -> usize {
    (POST_HEADER_LEN + service_len + name_len + user_len + 7) & !7
}

/// A checked view of a POST.
#[derive(Debug, Clone, Copy)]
pub struct PostView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> PostView<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        PostView { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check), so no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, MdError> {
        let v = PostView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks, in this order: the header, type POST, `length >= 28`, no flag but REFRESH,
    /// `item_id` 0, `post_id != 0`, reserved 0, `1 <= service_len <= 64`,
    /// `1 <= name_len <= 128`, `user_len <= 64` and 0 exactly when `origin` is 0, the names
    /// and padding fit, their alphabets, zero padding, then the fields.
    pub fn check(&self) -> Result<(), MdError> {
        parts(self.buffer.as_ref()).map(|_| ())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

struct Parts<'a> {
    service: &'a str,
    name: &'a str,
    user: &'a str,
    fields: WireFields<'a>,
}

fn parts(b: &[u8]) -> Result<Parts<'_>, MdError> {
    let len = check_typed(b, &RULES)?;
    let origin = read_u64(b, field::ORIGIN);
    if read_u32(b, field::POST_ID) == 0 {
        return Err(MdError::BadField {
            field: "post.post_id",
            value: 0,
        });
    }
    for &r in &b[field::RESERVED] {
        super::check_zero("post.reserved", r.into())?;
    }
    let service_len = usize::from(b[field::SERVICE_LEN]);
    let name_len = usize::from(b[field::NAME_LEN]);
    let user_len = usize::from(b[field::USER_LEN]);
    if service_len == 0 || service_len > MAX_SERVICE_LEN {
        return Err(MdError::BadField {
            field: "post.service_len",
            value: service_len as u64,
        });
    }
    if name_len == 0 || name_len > MAX_ITEM_NAME_LEN {
        return Err(MdError::BadField {
            field: "post.name_len",
            value: name_len as u64,
        });
    }
    if user_len > MAX_USER_LEN || (user_len == 0) != (origin == 0) {
        return Err(MdError::BadField {
            field: "post.user_len",
            value: user_len as u64,
        });
    }
    let at = fields_offset(service_len, name_len, user_len);
    if at > len {
        return Err(MdError::BadLength {
            length: len as u16,
            reason: "the names and their padding run past the end of the message",
        });
    }
    let name_at = field::NAMES + service_len;
    let user_at = name_at + name_len;
    let service = check_service(&b[field::NAMES..name_at])
        .map_err(|e| super::name_error("post.service_len", "post.service", e))?;
    let name = check_item_name(&b[name_at..user_at])
        .map_err(|e| super::name_error("post.name_len", "post.name", e))?;
    let user = if user_len == 0 {
        ""
    } else {
        check_user(&b[user_at..user_at + user_len])
            .map_err(|e| super::name_error("post.user_len", "post.user", e))?
    };
    if let Some(&p) = b[user_at + user_len..at].iter().find(|&&p| p != 0) {
        return Err(MdError::BadField {
            field: "post.padding",
            value: p.into(),
        });
    }
    let fields = WireFields::new(read_u16(b, field::FIELD_COUNT), &b[at..len], len as u16)?;
    Ok(Parts {
        service,
        name,
        user,
        fields,
    })
}

/// The parsed form of a POST; names and fields borrow the message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostRepr<'a> {
    /// A full image (else an update).
    pub refresh: bool,
    /// 0 from a client; the forwarding distributor's id on the backbone.
    pub origin: u64,
    pub post_id: u32,
    pub service: &'a str,
    pub name: &'a str,
    /// Empty from a client; the posting user on the backbone.
    pub user: &'a str,
    pub fields: FieldList<'a>,
}

impl<'a> PostRepr<'a> {
    /// Parses a POST, checking it first.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PostView<&'a T>) -> Result<Self, MdError> {
        let b: &'a [u8] = view.buffer.as_ref();
        let p = parts(b)?;
        Ok(PostRepr {
            refresh: b[super::header::field::FLAGS] & post_flags::REFRESH != 0,
            origin: read_u64(b, field::ORIGIN),
            post_id: read_u32(b, field::POST_ID),
            service: p.service,
            name: p.name,
            user: p.user,
            fields: FieldList::Wire(p.fields),
        })
    }

    /// Checks what a receiver would reject (see [`PostView::check`]).
    pub fn check(&self) -> Result<(), MdError> {
        if self.post_id == 0 {
            return Err(MdError::BadField {
                field: "post.post_id",
                value: 0,
            });
        }
        check_service(self.service.as_bytes())
            .map_err(|e| super::name_error("post.service_len", "post.service", e))?;
        check_item_name(self.name.as_bytes())
            .map_err(|e| super::name_error("post.name_len", "post.name", e))?;
        if self.user.is_empty() != (self.origin == 0) {
            return Err(MdError::BadField {
                field: "post.user_len",
                value: self.user.len() as u64,
            });
        }
        if !self.user.is_empty() {
            check_user(self.user.as_bytes())
                .map_err(|e| super::name_error("post.user_len", "post.user", e))?;
        }
        self.fields.check()?;
        if self.buffer_len() > super::MAX_MESSAGE_LEN {
            return Err(MdError::BadField {
                field: "post.length",
                value: self.buffer_len() as u64,
            });
        }
        Ok(())
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        fields_offset(self.service.len(), self.name.len(), self.user.len())
            + self.fields.encoded_len()
    }

    /// Writes every byte of the message, padding included.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len), or a name or the
    /// message is longer than its length field allows (see [`check`](Self::check)).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut PostView<T>) {
        let len = self.buffer_len();
        let b = view.buffer.as_mut();
        let flags = if self.refresh { post_flags::REFRESH } else { 0 };
        emit_header(b, MessageType::Post, flags, 0, len);
        write_u64(b, field::ORIGIN, self.origin);
        write_u32(b, field::POST_ID, self.post_id);
        let count = u16::try_from(self.fields.count()).expect("at most 65535 fields");
        write_u16(b, field::FIELD_COUNT, count);
        let len_byte = |s: &str| u8::try_from(s.len()).expect("a name of at most 255 bytes");
        b[field::SERVICE_LEN] = len_byte(self.service);
        b[field::NAME_LEN] = len_byte(self.name);
        b[field::USER_LEN] = len_byte(self.user);
        b[field::RESERVED].fill(0);
        let mut at = field::NAMES;
        for s in [self.service, self.name, self.user] {
            b[at..at + s.len()].copy_from_slice(s.as_bytes());
            at += s.len();
        }
        let fields_at = fields_offset(self.service.len(), self.name.len(), self.user.len());
        b[at..fields_at].fill(0);
        self.fields.emit(&mut b[fields_at..len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_util::arbitrary_message;
    use crate::model::{Field, Value};
    use proptest::prelude::*;

    const FIELDS: [Field<'static>; 1] = [Field::new(22, Value::price(18925, -2))];

    fn forward() -> PostRepr<'static> {
        PostRepr {
            refresh: false,
            origin: 0x0102_0304_0506_0708,
            post_id: 9,
            service: "FEED1",
            name: "AAA.O",
            user: "alice",
            fields: FieldList::List(&FIELDS),
        }
    }

    #[test]
    fn round_trips_with_names_padded_to_eight() {
        let repr = forward();
        // 28 + 5 + 5 + 5 = 43 -> 48; one price field: 12
        assert_eq!(repr.buffer_len(), 60);
        let mut b = [0xa5u8; 60];
        repr.emit(&mut PostView::new_unchecked(&mut b[..]));
        assert_eq!(&b[..8], [60, 0, 0x1c, 0, 0, 0, 0, 0]);
        assert_eq!(&b[28..48], b"FEED1AAA.Oalice\0\0\0\0\0");
        let view = PostView::new_checked(&b[..]).unwrap();
        assert_eq!(PostRepr::parse(&view).unwrap(), repr);
    }

    #[test]
    fn a_user_goes_with_an_origin_and_a_post_needs_an_id() {
        let client = PostRepr {
            origin: 0,
            user: "",
            refresh: true,
            ..forward()
        };
        let mut b = vec![0u8; client.buffer_len()];
        client.emit(&mut PostView::new_unchecked(&mut b[..]));
        assert_eq!(b[3], post_flags::REFRESH);
        assert_eq!(
            PostRepr::parse(&PostView::new_checked(&b[..]).unwrap()).unwrap(),
            client
        );
        let mut bad = b.clone();
        bad[8] = 1; // an origin without a user
        assert_eq!(
            PostView::new_checked(&bad[..]).unwrap_err(),
            MdError::BadField {
                field: "post.user_len",
                value: 0
            }
        );
        let mut bad = b.clone();
        bad[16] = 0;
        assert_eq!(
            PostView::new_checked(&bad[..]).unwrap_err(),
            MdError::BadField {
                field: "post.post_id",
                value: 0
            }
        );
        assert!(PostRepr {
            user: "alice",
            ..client
        }
        .check()
        .is_err());
    }

    fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(view) = PostView::new_checked(bytes) {
            let repr = PostRepr::parse(&view).unwrap();
            prop_assert!(repr.check().is_ok());
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut PostView::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in arbitrary_message(0x1c)) {
            assert_canonical(&bytes)?;
        }

        #[test]
        fn mutated_posts_never_panic(at in 0usize..60, x in 1u8.., cut in 0usize..=60) {
            let mut buf = vec![0u8; 60];
            forward().emit(&mut PostView::new_unchecked(&mut buf[..]));
            buf[at] ^= x;
            buf.truncate(cut);
            assert_canonical(&buf)?;
        }
    }
}
