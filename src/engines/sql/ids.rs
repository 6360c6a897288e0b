//! Row ids: the engine contract carries ids as strings; SQL rows have integer ids. An id that
//! is not plain decimal digits cannot be a row of ours and is skipped, never sent.

use crate::queue::engine::{ClaimToken, Held, StoredMessage};
use std::collections::BTreeMap;

/// A held row as SQL sees it: its integer id and its claim's token (see [`Held`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldRow {
    pub id: i64,
    pub token: Option<i64>,
}

/// The held messages that can be rows (a non-decimal id cannot be and is skipped).
pub fn held_rows(held: &[Held]) -> Vec<HeldRow> {
    held.iter().filter_map(|h| row_of(&h.id, h.token)).collect()
}

/// The rows of claimed `messages`, as [`held_rows`] has them.
pub fn claimed_rows(messages: &[StoredMessage]) -> Vec<HeldRow> {
    messages
        .iter()
        .filter_map(|m| row_of(&m.id, m.token))
        .collect()
}

fn row_of(id: &str, token: Option<ClaimToken>) -> Option<HeldRow> {
    row_id(id).map(|id| HeldRow {
        id,
        token: token.and_then(ClaimToken::delivered_at),
    })
}

/// A WHERE condition matching `rows`: a row with a token only while its `delivered_at` still
/// is that claim's (`token_of` is the dialect's token expression of `delivered_at`), a row
/// without by id alone. Rows claimed together share a token, so this is one `IN` list per
/// claim, not one condition per row. Integers only are inlined: nothing can be injected.
pub fn held_condition(rows: &[HeldRow], token_of: &str) -> String {
    let mut by_token: BTreeMap<Option<i64>, Vec<i64>> = BTreeMap::new();
    for row in rows {
        by_token.entry(row.token).or_default().push(row.id);
    }
    let parts: Vec<String> = by_token
        .into_iter()
        .map(|(token, ids)| match token {
            None => format!("id IN {}", id_list(&ids)),
            Some(token) => format!("({token_of} = {token} AND id IN {})", id_list(&ids)),
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// `(1,2,3)`: ids are integers parsed in Rust, so inlining them cannot inject anything, and
/// the statement needs no prepared form per list length.
pub fn id_list(ids: &[i64]) -> String {
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("({})", joined.join(","))
}

/// A row id as an integer: decimal digits only (no sign, as upstream's `/^\d+$/`), in range.
pub fn row_id(id: &str) -> Option<i64> {
    if crate::support::ident::is_decimal_id(id) {
        id.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_are_plain_integers() {
        assert_eq!(id_list(&[1, 22, 333]), "(1,22,333)");
    }

    #[test]
    fn held_conditions_fence_by_claim_and_go_by_id_without_one() {
        let rows = [
            HeldRow {
                id: 1,
                token: Some(7),
            },
            HeldRow { id: 2, token: None },
            HeldRow {
                id: 3,
                token: Some(7),
            },
            HeldRow {
                id: 4,
                token: Some(9),
            },
        ];
        assert_eq!(
            held_condition(&rows, "tok(delivered_at)"),
            "(id IN (2) OR (tok(delivered_at) = 7 AND id IN (1,3)) OR (tok(delivered_at) = 9 AND id IN (4)))"
        );
        let held = [
            Held {
                id: "5".into(),
                token: Some(ClaimToken::DeliveredAt(1)),
            },
            Held {
                id: "x".into(),
                token: Some(ClaimToken::DeliveredAt(1)),
            },
        ];
        assert_eq!(
            held_rows(&held),
            [HeldRow {
                id: 5,
                token: Some(1)
            }]
        );
    }

    #[test]
    fn only_plain_decimal_ids_are_row_ids() {
        assert_eq!(row_id("42"), Some(42));
        assert_eq!(row_id("-1"), None);
        assert_eq!(row_id("1-0"), None);
        assert_eq!(row_id("99999999999999999999"), None);
    }
}
