//! `peregrine post`: one contribution to an item, through a distributor to the item's
//! provider, and its answer:
//!
//! ```text
//! $ peregrine post --user alice AAA.O BID=189.25 ASK=189.27
//! ACK AAA.O accepted
//! $ peregrine post --user bob AAA.O BID=1
//! error: the post to AAA.O was not accepted: not-entitled: user bob may not post to AAA.O of FEED1
//! ```
//!
//! A driver over the consumer API (`Consumer::post`): logs in (downloading the distributor's
//! dictionary, by which the fields are read), posts, waits for the one ACK that answers the
//! post (the distributor answers `timeout` when the provider does not in time), and exits 0
//! only when it was accepted.

use super::md::connect_setup;
use crate::flags::md::PostArgs;
use anyhow::{bail, Result};
use peregrine_market_data::consumer::{Consumer, Event};
use peregrine_md::dictionary::Dictionary;
use serde_json::json;
use std::time::{Duration, Instant};

/// Longer than any distributor's post timeout may be set to wait without an answer: the
/// distributor always answers first, so this only ends a wait on a broken distributor.
const ANSWER_WAIT: Duration = Duration::from_secs(3600);

pub fn run(a: PostArgs) -> Result<()> {
    let (token, mut options) = connect_setup(&a.conn)?;
    if let Some(p) = &a.dictionary {
        let d = Dictionary::load(p).map_err(|e| anyhow::anyhow!("--dictionary: {e}"))?;
        options = options.with_dictionary(d);
    }
    let mut pairs = Vec::with_capacity(a.fields.len());
    for f in &a.fields {
        let Some((name, value)) = f.split_once('=') else {
            bail!("{f:?} is not a field: give NAME=VALUE, for example BID=189.25");
        };
        pairs.push((name, value));
    }
    let addresses: Vec<&str> = a.conn.connect.split(',').map(str::trim).collect();
    let mut consumer =
        Consumer::connect_with(&addresses, &a.conn.user, &token, options).map_err(|e| match e {
            peregrine_market_data::ConsumerError::Address { .. } => {
                anyhow::anyhow!("--connect {}: {e}", a.conn.connect)
            }
            e => anyhow::anyhow!("{e}"),
        })?;
    let id = consumer
        .post_named(&a.service, &a.item, &pairs, a.refresh)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let end = Instant::now() + ANSWER_WAIT;
    let mut answer: Option<(String, String)> = None;
    while answer.is_none() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no answer to the post to {} in {ANSWER_WAIT:?}", a.item);
        }
        consumer
            .poll(left.min(Duration::from_secs(1)), &mut |e| {
                if let Event::Ack {
                    post_id,
                    code,
                    text,
                    ..
                } = e
                {
                    if post_id == id {
                        answer = Some((code.name().to_string(), text.to_string()));
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let (code, text) = answer.expect("answered");
    if a.json {
        println!(
            "{}",
            json!({"item": a.item, "service": a.service, "post_id": id, "code": code, "text": text})
        );
    }
    if code != "accepted" {
        bail!(
            "the post to {} was not accepted: {code}{}",
            a.item,
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        );
    }
    if !a.json {
        println!("ACK {} accepted", a.item);
    }
    Ok(())
}
