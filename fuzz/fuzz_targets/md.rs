//! Market data messages (peregrine-md): `Message::parse` and each type's own decoder never
//! panic and agree; what parses passes `check` and re-emits to the same bytes; `Messages`
//! splits any stream into whole messages without losing or inventing a byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_md::codec::*;

fn parse_specific(ty: MessageType, b: &[u8]) -> Result<Message<'_>, MdError> {
    Ok(match ty {
        MessageType::Refresh => {
            Message::Refresh(RefreshRepr::parse(&RefreshView::new_checked(b)?)?)
        }
        MessageType::Update => Message::Update(UpdateRepr::parse(&UpdateView::new_checked(b)?)?),
        MessageType::Status => Message::Status(StatusRepr::parse(&StatusView::new_checked(b)?)?),
        MessageType::Login => Message::Login(LoginRepr::parse(&LoginView::new_checked(b)?)?),
        MessageType::LoginResponse => Message::LoginResponse(LoginResponseRepr::parse(
            &LoginResponseView::new_checked(b)?,
        )?),
        MessageType::Open => Message::Open(OpenRepr::parse(&OpenView::new_checked(b)?)?),
        MessageType::Close => Message::Close(CloseRepr::parse(&CloseView::new_checked(b)?)?),
        MessageType::Conflated => {
            Message::Conflated(ConflatedRepr::parse(&ConflatedView::new_checked(b)?)?)
        }
        MessageType::Ping => Message::Ping(PingRepr::parse(&PingView::new_checked(
            b,
            PingKind::Ping,
        )?)?),
        MessageType::Pong => Message::Pong(PingRepr::parse(&PingView::new_checked(
            b,
            PingKind::Pong,
        )?)?),
        MessageType::Pause => Message::Pause(PauseRepr::parse(&PauseView::new_checked(
            b,
            PauseKind::Pause,
        )?)?),
        MessageType::Resume => Message::Resume(PauseRepr::parse(&PauseView::new_checked(
            b,
            PauseKind::Resume,
        )?)?),
        MessageType::Directory => {
            Message::Directory(DirectoryRepr::parse(&DirectoryView::new_checked(b)?)?)
        }
        MessageType::DictionaryRequest => Message::DictionaryRequest(
            DictionaryRequestRepr::parse(&DictionaryRequestView::new_checked(b)?)?,
        ),
        MessageType::Dictionary => {
            Message::Dictionary(DictionaryRepr::parse(&DictionaryView::new_checked(b)?)?)
        }
        MessageType::Post => Message::Post(PostRepr::parse(&PostView::new_checked(b)?)?),
        MessageType::Ack => Message::Ack(AckRepr::parse(&AckView::new_checked(b)?)?),
        MessageType::ImageRequest => {
            Message::ImageRequest(ImageRequestRepr::parse(&ImageRequestView::new_checked(b)?)?)
        }
    })
}

/// One message at the start of `data`: never a panic; the decoders agree; what parses
/// re-emits to its bytes.
fn one(data: &[u8]) {
    let parsed = Message::parse(data);
    if let Some(&t) = data.get(2) {
        if let Ok(ty) = MessageType::from_u8(t) {
            assert_eq!(parse_specific(ty, data), parsed, "the decoders disagree");
        }
    }
    let Ok(m) = parsed else { return };
    assert_eq!(m.check(), Ok(()), "a parsed message passes check");
    let len = m.buffer_len();
    assert_eq!(len, usize::from(u16::from_le_bytes([data[0], data[1]])));
    let mut out = vec![0xa5u8; len];
    assert_eq!(m.emit(&mut out), len);
    assert_eq!(&out[..], &data[..len], "re-emitted bytes differ");
}

fuzz_target!(|data: &[u8]| {
    one(data);
    let mut messages = Messages::new(data);
    let mut consumed = 0;
    while let Some(m) = messages.next() {
        let Ok((ty, bytes)) = m else {
            assert!(messages.next().is_none(), "nothing after an error");
            break;
        };
        assert_eq!(bytes.as_ptr() as usize - data.as_ptr() as usize, consumed);
        assert_eq!(bytes[2], ty as u8);
        consumed += bytes.len();
        one(bytes);
    }
    assert_eq!(consumed + messages.remaining().len(), data.len());
    if !messages.failed() && !messages.remaining().is_empty() {
        assert!(messages.missing() > 0, "a partial message lacks bytes");
    }
});
