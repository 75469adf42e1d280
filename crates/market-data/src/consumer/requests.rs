//! The application's requests through a [`Consumer`](super::Consumer): OPEN by name, glob or
//! view, snapshots, PAUSE, RESUME, CLOSE and posts.

use super::error::ConsumerError;
use super::Consumer;
use peregrine_md::consumer::ConsumerError as SessionError;

impl Consumer {
    /// Posts `fields` to `item` of `service` (`refresh`: a full image, for a new item; else
    /// an update); returns the post's id. Exactly one `Ack` event with that id answers it:
    /// the provider's accept or refusal, the distributor's refusal (`not-entitled`,
    /// `service-down`, ...), or `timeout`. Only while logged in (version 2).
    pub fn post(
        &mut self,
        service: &str,
        item: &str,
        fields: &[peregrine_md::model::Field<'_>],
        refresh: bool,
    ) -> Result<u32, ConsumerError> {
        let id = self.core.post(service, item, fields, refresh)?;
        self.flush_out();
        Ok(id)
    }

    /// [`post`](Self::post) with fields named as the dictionary names them, values read from
    /// text as their types say (`BID=189.25`).
    pub fn post_named(
        &mut self,
        service: &str,
        item: &str,
        fields: &[(&str, &str)],
        refresh: bool,
    ) -> Result<u32, ConsumerError> {
        let mut owned = Vec::with_capacity(fields.len());
        for (name, text) in fields {
            let (fid, v) = self
                .dictionary()
                .parse_value(name, text)
                .map_err(|why| ConsumerError::Session(SessionError::BadPost { why }))?;
            owned.push((fid, v));
        }
        let list: Vec<peregrine_md::model::Field<'_>> = owned
            .iter()
            .map(|(fid, v)| peregrine_md::model::Field::new(*fid, v.as_value()))
            .collect();
        self.post(service, item, &list, refresh)
    }

    /// Opens `patterns` (names and globs) of `service`; returns the request's id. Its images
    /// and updates arrive through [`poll`](Self::poll).
    pub fn open(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, None)
    }

    /// What [`open`](Self::open), [`open_view`](Self::open_view),
    /// [`snapshot`](Self::snapshot) and [`snapshot_view`](Self::snapshot_view) do: `snapshot`
    /// for the images only, `view` the field names (`None`: every field).
    pub fn request(
        &mut self,
        service: &str,
        patterns: &[&str],
        snapshot: bool,
        view: Option<&[&str]>,
    ) -> Result<u32, ConsumerError> {
        let fids = view.map(|v| self.view_ids(v)).transpose()?;
        let id = self
            .core
            .request(service, patterns, snapshot, fids.as_deref())?;
        self.flush_out();
        Ok(id)
    }

    /// [`open`](Self::open) for the fields named `view` only (names of the consumer's
    /// dictionary, or `#FID`): REFRESHes carry those fields, and an UPDATE that changes none
    /// of them is not sent. Two requests holding one item each get their own events with
    /// their own fields (`request` says whose).
    pub fn open_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[&str],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, false, Some(view))
    }

    /// [`open_view`](Self::open_view) by field ids.
    pub fn open_view_ids(
        &mut self,
        service: &str,
        patterns: &[&str],
        fids: &[u16],
    ) -> Result<u32, ConsumerError> {
        let id = self.core.request(service, patterns, false, Some(fids))?;
        self.flush_out();
        Ok(id)
    }

    /// [`snapshot`](Self::snapshot) of the fields named `view` only.
    pub fn snapshot_view(
        &mut self,
        service: &str,
        patterns: &[&str],
        view: &[&str],
    ) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, Some(view))
    }

    /// Field names (or `#FID`) to ids through the dictionary.
    pub(super) fn view_ids(&self, view: &[&str]) -> Result<Vec<u16>, ConsumerError> {
        view.iter()
            .map(|name| {
                let by_id = name.strip_prefix('#').and_then(|n| n.parse::<u16>().ok());
                by_id
                    .or_else(|| self.dictionary.by_name(name).map(|d| d.fid))
                    .ok_or_else(|| {
                        ConsumerError::Session(SessionError::BadRequest {
                            why: format!(
                                "field {name:?} of the view is not in the dictionary: give a \
                                 field name (BID, ASK, ...) or #FID"
                            ),
                        })
                    })
            })
            .collect()
    }

    /// Asks for the images of `patterns` of `service` only; returns the request's id. Each
    /// item comes as an `Event::Refresh` with `snapshot` set (or a `Status`), then a `Status`
    /// `closed` with an empty item and this request id ends it.
    pub fn snapshot(&mut self, service: &str, patterns: &[&str]) -> Result<u32, ConsumerError> {
        self.request(service, patterns, true, None)
    }

    /// Pauses a request (0: every request open now): the distributor keeps its items' latest
    /// state only, until [`resume`](Self::resume); kept across reconnections.
    pub fn pause(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.core.pause(request)?;
        self.flush_out();
        Ok(())
    }

    /// Resumes a paused request (0: every one): a `Refresh` flagged `conflated` (or a
    /// `Status`) per item that changed meanwhile, then its updates again.
    pub fn resume(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.core.resume(request)?;
        self.flush_out();
        Ok(())
    }

    /// Closes a request.
    pub fn close(&mut self, request: u32) -> Result<(), ConsumerError> {
        self.core.close(request)?;
        self.flush_out();
        Ok(())
    }
}
