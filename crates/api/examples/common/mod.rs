//! What the measuring examples share: their message count, the first argument.

/// The first command-line argument as a count of messages, `default` without one; an argument
/// that is not a number is an error naming it.
pub fn count_arg(default: u64) -> Result<u64, String> {
    match std::env::args().nth(1) {
        None => Ok(default),
        Some(a) => a
            .parse()
            .map_err(|e| format!("the message count {a:?} is not a number ({e})")),
    }
}
