//! A publisher by topic: one session over a shared-memory log and a UDP endpoint (or the
//! URIs configuration names), each advertised, with a message offered to every leg.

use super::Handle;
use peregrine_proto::resolver::PublicationId;
use peregrine_transport::ipc::IpcPublisher;
use peregrine_transport::{AnyPublisher, OfferError, PublisherCounters};
use std::sync::Arc;

/// A publisher by topic: one session on shared memory and/or the network.
///
/// Every message goes to the shared-memory log; it goes to the network only while a network
/// subscriber is registered. When the network refuses a message the log already took, the
/// message is kept and sent before the next one, so both sides see every message once, in order.
#[derive(Debug)]
pub(crate) struct MultiPublisher {
    ipc: Option<IpcPublisher>,
    /// The network side; never `AnyPublisher::Ipc` (the shared-memory log is `ipc`). A type
    /// without that arm would be a second copy of the transport enum and its dispatch.
    net: Option<AnyPublisher>,
    pending: Option<Vec<u8>>,
    scratch: Vec<u8>,
    registration: Option<(Arc<Handle>, PublicationId)>,
    session_id: u32,
    closed: bool,
}

impl MultiPublisher {
    pub(crate) fn new(
        ipc: Option<IpcPublisher>,
        net: Option<AnyPublisher>,
        handle: Arc<Handle>,
        publication: PublicationId,
        session_id: u32,
    ) -> Self {
        MultiPublisher {
            ipc,
            net,
            pending: None,
            scratch: Vec::new(),
            registration: Some((handle, publication)),
            session_id,
            closed: false,
        }
    }

    fn net_active(&self) -> bool {
        self.net.as_ref().is_some_and(|n| n.subscriber_count() > 0)
    }

    /// Sends the message the network refused last time; false while it still refuses.
    fn retry_pending(&mut self) -> Result<(), OfferError> {
        if let (Some(msg), Some(net)) = (&self.pending, &mut self.net) {
            net.offer(msg)?;
            self.pending = None;
        }
        Ok(())
    }

    pub(crate) fn offer_with<F: FnOnce(&mut [u8])>(
        &mut self,
        len: usize,
        fill: F,
    ) -> Result<u64, OfferError> {
        if self.closed {
            return Err(OfferError::Closed);
        }
        self.retry_pending()?;
        if !self.net_active() {
            return match (&mut self.ipc, &mut self.net) {
                (Some(ipc), _) => ipc.offer_with(len, fill),
                (None, Some(net)) => net.offer_with(len, fill),
                (None, None) => Err(OfferError::Closed),
            };
        }
        let max = self.max_message_len();
        if len > max {
            return Err(OfferError::TooLarge { len, max });
        }
        self.scratch.clear();
        self.scratch.resize(len, 0);
        fill(&mut self.scratch);
        let seq = match &mut self.ipc {
            Some(ipc) => Some(ipc.offer(&self.scratch)?),
            None => None,
        };
        let net = self.net.as_mut().expect("net_active");
        match (net.offer(&self.scratch), seq) {
            (Ok(s), None) => Ok(s),
            (Ok(_), Some(s)) => Ok(s),
            (Err(e), None) => Err(e),
            (Err(_), Some(s)) => {
                self.pending = Some(std::mem::take(&mut self.scratch));
                Ok(s)
            }
        }
    }

    pub(crate) fn flush(&mut self) -> Result<(), OfferError> {
        self.retry_pending()?;
        match &mut self.net {
            Some(n) => n.flush(),
            None => Ok(()),
        }
    }

    pub(crate) fn do_work(&mut self) -> usize {
        let _ = self.retry_pending();
        match &mut self.net {
            Some(n) => n.do_work(),
            None => 0,
        }
    }

    pub(crate) fn max_message_len(&self) -> usize {
        let a = self.ipc.as_ref().map(|p| p.max_message_len());
        let b = self.net.as_ref().map(AnyPublisher::max_message_len);
        a.into_iter().chain(b).min().unwrap_or(0)
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        self.ipc.as_ref().map_or(0, IpcPublisher::subscriber_count)
            + self.net.as_ref().map_or(0, AnyPublisher::subscriber_count)
    }

    pub(crate) fn session_id(&self) -> u32 {
        self.session_id
    }

    pub(crate) fn stale_segments_removed(&self) -> usize {
        self.ipc
            .as_ref()
            .map_or(0, IpcPublisher::stale_segments_removed)
    }

    /// Messages are counted once (the shared-memory side when there is one); the network's
    /// retransmission and NAK counters are added.
    pub(crate) fn counters(&self) -> PublisherCounters {
        let net = self.net.as_ref().map(AnyPublisher::counters);
        match (self.ipc.as_ref().map(IpcPublisher::counters), net) {
            (Some(mut c), Some(n)) => {
                c.naks_received += n.naks_received;
                c.retransmitted += n.retransmitted;
                c.retransmit_unavailable += n.retransmit_unavailable;
                c.retransmit_refused += n.retransmit_refused;
                c.subscribers_reaped += n.subscribers_reaped;
                c.flow_dropped += n.flow_dropped;
                c.joins_refused += n.joins_refused;
                c
            }
            (Some(c), None) | (None, Some(c)) => c,
            (None, None) => PublisherCounters::default(),
        }
    }

    pub(crate) fn close(&mut self) {
        if self.closed {
            return;
        }
        let _ = self.retry_pending();
        if let Some(n) = &mut self.net {
            n.close();
        }
        // Marks the log closed for its subscribers (its name goes when the publisher is
        // dropped); its counters stay readable.
        if let Some(i) = &mut self.ipc {
            i.close();
        }
        if let Some((h, id)) = self.registration.take() {
            h.withdraw(id);
        }
        self.closed = true;
    }
}

impl Drop for MultiPublisher {
    fn drop(&mut self) {
        self.close();
    }
}
