//! Any message: parse by dispatching on the header's type, emit whichever repr you hold.

use super::header::{Header, MessageType};
use super::{
    AckRepr, AckView, CloseRepr, CloseView, ConflatedRepr, ConflatedView, DictionaryRepr,
    DictionaryRequestRepr, DictionaryRequestView, DictionaryView, DirectoryRepr, DirectoryView,
    ImageRequestRepr, ImageRequestView, LoginRepr, LoginResponseRepr, LoginResponseView, LoginView,
    MdError, OpenRepr, OpenView, PauseKind, PauseRepr, PauseView, PingKind, PingRepr, PingView,
    PostRepr, PostView, RefreshRepr, RefreshView, StatusRepr, StatusView, UpdateRepr, UpdateView,
};

/// The parsed form of any message (of version 2: version 1's and PING, PONG, PAUSE, RESUME,
/// DIRECTORY, DICTIONARY_REQUEST, DICTIONARY, POST, ACK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    Refresh(RefreshRepr<'a>),
    Update(UpdateRepr<'a>),
    Status(StatusRepr<'a>),
    Login(LoginRepr<'a>),
    LoginResponse(LoginResponseRepr<'a>),
    Open(OpenRepr<'a>),
    Close(CloseRepr),
    Conflated(ConflatedRepr),
    Ping(PingRepr),
    Pong(PingRepr),
    Pause(PauseRepr),
    Resume(PauseRepr),
    Directory(DirectoryRepr<'a>),
    DictionaryRequest(DictionaryRequestRepr),
    Dictionary(DictionaryRepr<'a>),
    Post(PostRepr<'a>),
    Ack(AckRepr<'a>),
    ImageRequest(ImageRequestRepr),
}

impl<'a> Message<'a> {
    /// Parses the message at the start of `buffer` (which may hold more bytes after it):
    /// checks the header, then the message as its type requires. Never panics, never
    /// allocates.
    pub fn parse(buffer: &'a [u8]) -> Result<Self, MdError> {
        let ty = Header::new_checked(buffer)?.message_type()?;
        Ok(match ty {
            MessageType::Refresh => {
                Message::Refresh(RefreshRepr::parse(&RefreshView::new_unchecked(buffer))?)
            }
            MessageType::Update => {
                Message::Update(UpdateRepr::parse(&UpdateView::new_unchecked(buffer))?)
            }
            MessageType::Status => {
                Message::Status(StatusRepr::parse(&StatusView::new_unchecked(buffer))?)
            }
            MessageType::Login => {
                Message::Login(LoginRepr::parse(&LoginView::new_unchecked(buffer))?)
            }
            MessageType::LoginResponse => Message::LoginResponse(LoginResponseRepr::parse(
                &LoginResponseView::new_unchecked(buffer),
            )?),
            MessageType::Open => Message::Open(OpenRepr::parse(&OpenView::new_unchecked(buffer))?),
            MessageType::Close => {
                Message::Close(CloseRepr::parse(&CloseView::new_unchecked(buffer))?)
            }
            MessageType::Conflated => {
                Message::Conflated(ConflatedRepr::parse(&ConflatedView::new_unchecked(buffer))?)
            }
            MessageType::Ping => Message::Ping(PingRepr::parse(&PingView::new_unchecked(
                buffer,
                PingKind::Ping,
            ))?),
            MessageType::Pong => Message::Pong(PingRepr::parse(&PingView::new_unchecked(
                buffer,
                PingKind::Pong,
            ))?),
            MessageType::Pause => Message::Pause(PauseRepr::parse(&PauseView::new_unchecked(
                buffer,
                PauseKind::Pause,
            ))?),
            MessageType::Resume => Message::Resume(PauseRepr::parse(&PauseView::new_unchecked(
                buffer,
                PauseKind::Resume,
            ))?),
            MessageType::Directory => {
                Message::Directory(DirectoryRepr::parse(&DirectoryView::new_unchecked(buffer))?)
            }
            MessageType::DictionaryRequest => Message::DictionaryRequest(
                DictionaryRequestRepr::parse(&DictionaryRequestView::new_unchecked(buffer))?,
            ),
            MessageType::Dictionary => Message::Dictionary(DictionaryRepr::parse(
                &DictionaryView::new_unchecked(buffer),
            )?),
            MessageType::Post => Message::Post(PostRepr::parse(&PostView::new_unchecked(buffer))?),
            MessageType::Ack => Message::Ack(AckRepr::parse(&AckView::new_unchecked(buffer))?),
            MessageType::ImageRequest => Message::ImageRequest(ImageRequestRepr::parse(
                &ImageRequestView::new_unchecked(buffer),
            )?),
        })
    }

    pub const fn message_type(&self) -> MessageType {
        match self {
            Message::Refresh(_) => MessageType::Refresh,
            Message::Update(_) => MessageType::Update,
            Message::Status(_) => MessageType::Status,
            Message::Login(_) => MessageType::Login,
            Message::LoginResponse(_) => MessageType::LoginResponse,
            Message::Open(_) => MessageType::Open,
            Message::Close(_) => MessageType::Close,
            Message::Conflated(_) => MessageType::Conflated,
            Message::Ping(_) => MessageType::Ping,
            Message::Pong(_) => MessageType::Pong,
            Message::Pause(_) => MessageType::Pause,
            Message::Resume(_) => MessageType::Resume,
            Message::Directory(_) => MessageType::Directory,
            Message::DictionaryRequest(_) => MessageType::DictionaryRequest,
            Message::Dictionary(_) => MessageType::Dictionary,
            Message::Post(_) => MessageType::Post,
            Message::Ack(_) => MessageType::Ack,
            Message::ImageRequest(_) => MessageType::ImageRequest,
        }
    }

    /// Checks what a receiver would reject (each repr's `check`); `emit` writes whatever it
    /// is given, so a sender checks untrusted content first.
    pub fn check(&self) -> Result<(), MdError> {
        match self {
            Message::Refresh(r) => r.check(),
            Message::Update(r) => r.check(),
            Message::Status(r) => r.check(),
            Message::Login(r) => r.check(),
            Message::LoginResponse(r) => r.check(),
            Message::Open(r) => r.check(),
            Message::Directory(r) => r.check(),
            Message::Dictionary(r) => r.check(),
            Message::Post(r) => r.check(),
            Message::Ack(r) => r.check(),
            Message::Close(r) if r.request_id == 0 => Err(MdError::BadField {
                field: "close.request_id",
                value: 0,
            }),
            Message::Close(_)
            | Message::Conflated(_)
            | Message::Ping(_)
            | Message::Pong(_)
            | Message::Pause(_)
            | Message::Resume(_)
            | Message::DictionaryRequest(_)
            | Message::ImageRequest(_) => Ok(()),
        }
    }

    /// Bytes `emit` writes (the message's `length`).
    pub fn buffer_len(&self) -> usize {
        match self {
            Message::Refresh(r) => r.buffer_len(),
            Message::Update(r) => r.buffer_len(),
            Message::Status(r) => r.buffer_len(),
            Message::Login(r) => r.buffer_len(),
            Message::LoginResponse(r) => r.buffer_len(),
            Message::Open(r) => r.buffer_len(),
            Message::Close(r) => r.buffer_len(),
            Message::Conflated(r) => r.buffer_len(),
            Message::Ping(r) | Message::Pong(r) => r.buffer_len(),
            Message::Pause(r) | Message::Resume(r) => r.buffer_len(),
            Message::Directory(r) => r.buffer_len(),
            Message::DictionaryRequest(r) => r.buffer_len(),
            Message::Dictionary(r) => r.buffer_len(),
            Message::Post(r) => r.buffer_len(),
            Message::Ack(r) => r.buffer_len(),
            Message::ImageRequest(r) => r.buffer_len(),
        }
    }

    /// Writes the message at the start of `buffer` and returns its length.
    ///
    /// # Panics
    /// If `buffer` is shorter than [`buffer_len`](Self::buffer_len), or the message breaks a
    /// limit its encoding cannot express (see [`check`](Self::check)).
    pub fn emit(&self, buffer: &mut [u8]) -> usize {
        let len = self.buffer_len();
        let b = &mut buffer[..len];
        match self {
            Message::Refresh(r) => r.emit(&mut RefreshView::new_unchecked(b)),
            Message::Update(r) => r.emit(&mut UpdateView::new_unchecked(b)),
            Message::Status(r) => r.emit(&mut StatusView::new_unchecked(b)),
            Message::Login(r) => r.emit(&mut LoginView::new_unchecked(b)),
            Message::LoginResponse(r) => r.emit(&mut LoginResponseView::new_unchecked(b)),
            Message::Open(r) => r.emit(&mut OpenView::new_unchecked(b)),
            Message::Close(r) => r.emit(&mut CloseView::new_unchecked(b)),
            Message::Conflated(r) => r.emit(&mut ConflatedView::new_unchecked(b)),
            Message::Ping(r) => r.emit(&mut PingView::new_unchecked(b, PingKind::Ping)),
            Message::Pong(r) => r.emit(&mut PingView::new_unchecked(b, PingKind::Pong)),
            Message::Pause(r) => r.emit(&mut PauseView::new_unchecked(b, PauseKind::Pause)),
            Message::Resume(r) => r.emit(&mut PauseView::new_unchecked(b, PauseKind::Resume)),
            Message::Directory(r) => r.emit(&mut DirectoryView::new_unchecked(b)),
            Message::DictionaryRequest(r) => r.emit(&mut DictionaryRequestView::new_unchecked(b)),
            Message::Dictionary(r) => r.emit(&mut DictionaryView::new_unchecked(b)),
            Message::Post(r) => r.emit(&mut PostView::new_unchecked(b)),
            Message::Ack(r) => r.emit(&mut AckView::new_unchecked(b)),
            Message::ImageRequest(r) => r.emit(&mut ImageRequestView::new_unchecked(b)),
        }
        len
    }

    /// Appends the encoded message to `out`; returns its length.
    pub fn emit_to_vec(&self, out: &mut Vec<u8>) -> usize {
        let at = out.len();
        out.resize(at + self.buffer_len(), 0);
        self.emit(&mut out[at..])
    }
}
