//! The dictionary download: a DICTIONARY_REQUEST after each version 2 login, the parts put
//! together, then checked against the application's own dictionary.

use super::{ConsumerCore, ConsumerError, Event, Phase};
use crate::codec::{DictionaryRepr, DictionaryRequestRepr, Message};
use crate::dictionary::{Dictionary, FieldDef};

impl ConsumerCore {
    /// Queues a DICTIONARY_REQUEST; the parts that answer it are put together from part 0.
    pub(super) fn request_dictionary(&mut self) {
        Message::DictionaryRequest(DictionaryRequestRepr).emit_to_vec(&mut self.out);
        self.download = Some((Dictionary::default(), 0));
    }

    /// One part of the distributor's dictionary. A part out of order, or a field the parts
    /// give twice, breaks the connection (a new one downloads it again); a complete dictionary
    /// that disagrees with the application's ends the session.
    pub(super) fn on_dictionary(
        &mut self,
        d: &DictionaryRepr<'_>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), ConsumerError> {
        let Some((dict, next)) = &mut self.download else {
            return Err(ConsumerError::Protocol {
                error: "a DICTIONARY that was not asked for".into(),
            });
        };
        if d.part != *next {
            return Err(ConsumerError::Protocol {
                error: format!("DICTIONARY part {} where part {next} was due", d.part),
            });
        }
        *next = next.wrapping_add(1);
        for e in d.fields.iter() {
            dict.insert(FieldDef::from_entry(&e))
                .map_err(|why| ConsumerError::Protocol {
                    error: format!("the distributor's dictionary: {why}"),
                })?;
        }
        if !d.complete {
            return Ok(());
        }
        let (dict, _) = self.download.take().expect("downloading");
        if let Some(local) = &self.config.dictionary {
            if let Err(m) = local.agrees_with(&dict) {
                self.phase = Phase::Refused;
                return Err(ConsumerError::DictionaryMismatch(m));
            }
        }
        let dictionary = &*self.dictionary.insert(dict);
        on_event(Event::Dictionary { dictionary });
        Ok(())
    }

    /// A dictionary was asked for and has not come whole yet.
    pub fn dictionary_pending(&self) -> bool {
        self.download.is_some()
    }

    /// The distributor's field dictionary, once downloaded whole (kept across reconnections
    /// until a new one arrives).
    pub fn dictionary(&self) -> Option<&Dictionary> {
        self.dictionary.as_ref()
    }
}
