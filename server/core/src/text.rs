//! Text hookd stores from outside (a receiver's error, an operator's reason), kept bounded.

/// The most bytes of any text hookd stores from outside (an attempt's error, a reason):
/// a receiver's answer must not grow the store or the answers that show it (finding F4:
/// a 400 KB redirect `Location` per attempt).
pub const MAX_TEXT_BYTES: usize = 1_024;

/// Cuts `text` to at most `max` bytes, on a character boundary, marking the cut.
pub fn bound_text(text: &mut String, max: usize) {
    const MARK: &str = " [truncated]";
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(MARK.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
}
