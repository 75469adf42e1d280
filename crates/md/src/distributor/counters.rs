//! The distributor's counters. Names are stable: they appear in `peregrine stat` and JSON.

macro_rules! counters {
    ($($(#[doc = $doc:literal])+ $name:ident,)*) => {
        /// What the distributor counted since it started. Every field only grows.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[doc = $doc])+ pub $name: u64,)*
        }

        impl Counters {
            /// The counters' names, in a stable order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];

            /// Each counter's name and value, in the order of [`NAMES`](Self::NAMES).
            pub fn values(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($name), self.$name),)*].into_iter()
            }
        }
    };
}

counters! {
    /// Client connections accepted by `client_connected`.
    clients_connected,
    /// Connections refused: `max_clients_per_address` from their address at connection, or
    /// `max_clients` (or their user's `max_clients_per_user`) logged in at login.
    clients_refused,
    /// Logins accepted.
    logins_accepted,
    /// Logins refused: unknown user, wrong token, unsupported version, malformed or missing
    /// LOGIN, no LOGIN in time.
    logins_denied,
    /// Messages received from clients (complete ones).
    client_messages,
    /// Client connections closed for a protocol error after login (a malformed message, a
    /// second LOGIN, a message type clients do not send).
    protocol_errors,
    /// Of those and of the refused logins: messages the codec rejected.
    malformed_messages,
    /// OPEN requests registered.
    requests_opened,
    /// Snapshot requests (OPEN flagged SNAPSHOT) answered and closed.
    snapshots,
    /// Requests paused (each request once per PAUSE that paused it).
    requests_paused,
    /// UPDATEs not sent to a client because every request of it holding the item is paused.
    updates_paused,
    /// REFRESH or STATUS messages sent on a RESUME for items that changed while paused.
    resumed_images,
    /// CLOSE requests served.
    requests_closed,
    /// Requests (or names of a request) answered with STATUS `rejected`: request id in use or
    /// unknown, too many requests or patterns, watchlist full.
    requests_rejected,
    /// Names answered with STATUS `not-entitled`.
    not_entitled,
    /// Names answered with STATUS `not-found`.
    not_found,
    /// Messages received on the backbone.
    backbone_messages,
    /// Backbone messages dropped: malformed, a type a feed does not send, a REFRESH of another
    /// service, a STATUS for an unknown item.
    backbone_rejected,
    /// REFRESHes applied to the cache.
    refreshes_applied,
    /// UPDATEs merged into the cache and forwarded.
    updates_applied,
    /// UPDATEs for an item the feed's id does not name, or one without a current image.
    updates_without_image,
    /// UPDATEs whose item_seq was not the previous one + 1 (the item goes stale).
    sequence_gaps,
    /// REFRESHes of new items refused because the cache held `max_items`.
    cache_full,
    /// Items that went stale (backbone loss, feed gone, sequence gap, the feed's STATUS).
    items_stale,
    /// Group STATUSes sent: one per version 2 client and service that went stale as a whole,
    /// instead of one STATUS per item.
    group_statuses,
    /// IMAGE_REQUESTs produced.
    image_requests,
    /// Backbone losses reported by the transport.
    backbone_losses,
    /// Times a feed went away.
    feeds_gone,
    /// Feed sessions joined from their first message: their start-up images are taken as
    /// they come, and none is asked for.
    feeds_joined_at_start,
    /// UPDATE messages queued to clients (one per watcher).
    updates_sent,
    /// UPDATEs not sent to a client because they change none of the fields of its view.
    updates_outside_views,
    /// Bytes queued to clients.
    bytes_queued,
    /// Times a client's queue passed its bound and conflation began.
    conflations,
    /// UPDATEs not queued to a conflating client.
    updates_conflated,
    /// REFRESH or STATUS messages sent after a CONFLATED.
    conflated_images,
    /// Clients disconnected because their queue passed its bound (policy `disconnect`, or a
    /// request answer that cannot be conflated).
    slow_disconnects,
    /// Events dropped because the driver did not poll them (at most 4096 are kept).
    events_dropped,
    /// Logins refused unchecked because their address or user failed too often (throttle).
    logins_throttled,
    /// Connections waiting to log in closed to make room (`max_pending_clients`).
    pending_evicted,
    /// PINGs sent to clients logged in with version 2.
    pings_sent,
    /// PONGs received from clients.
    pongs_received,
    /// Clients closed because nothing was read from them for three ping intervals.
    clients_silent,
    /// DICTIONARY_REQUESTs answered (with every part of the dictionary).
    dictionaries_sent,
    /// POSTs received from clients.
    posts,
    /// Posts forwarded to a provider.
    posts_forwarded,
    /// Posts answered by the distributor itself and not forwarded: not entitled, unknown or
    /// down service, a field of the wrong type, too many in flight.
    posts_refused,
    /// Forwarded posts the provider accepted.
    posts_accepted,
    /// Forwarded posts the provider refused.
    posts_nacked,
    /// Forwarded posts answered `timeout`: no ACK within `post_timeout_ns`.
    posts_timed_out,
    /// ACKs of this distributor's origin that matched no post in flight (late, after the
    /// timeout, or forged).
    acks_unmatched,
    /// A/B feeds: UPDATEs another feed had delivered already (dropped).
    updates_duplicate,
    /// A/B feeds: UPDATEs ahead of the cache while another feed could still deliver the one
    /// missing (dropped; the item waits `feed_gap_window_ns` for it).
    updates_ahead,
    /// A/B feeds: REFRESHes no newer than the cache's image from another feed (not applied;
    /// the feed's route to the item is kept).
    refreshes_behind,
    /// A/B feeds: REFRESHes with the cache's `item_seq` and another image (feeds not fed the
    /// same stream).
    feed_disagreements,
    /// A/B feeds: feed losses another feed covered (nothing went stale).
    feed_losses_covered,
    /// A/B feeds: a feed's STATUS stale or closed while another feed carries the item.
    statuses_covered,
    /// REFRESHes whose feed holds `max_items` routes already (applied, but the feed's UPDATEs
    /// of the item cannot be routed).
    routes_refused,
}
