//! Row ids: the engine contract carries ids as strings; SQL rows have integer ids. An id that
//! is not plain decimal digits cannot be a row of ours and is skipped, never sent.

/// `(1,2,3)`: ids are integers parsed in Rust, so inlining them cannot inject anything, and
/// the statement needs no prepared form per list length.
pub fn id_list(ids: &[i64]) -> String {
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("({})", joined.join(","))
}

/// A row id as an integer: decimal digits only (no sign, as upstream's `/^\d+$/`), in range.
pub fn row_id(id: &str) -> Option<i64> {
    if crate::ident::is_decimal_id(id) {
        id.parse().ok()
    } else {
        None
    }
}

/// Row ids as integers; an id that is not one cannot be in a table and is skipped.
pub fn numeric_ids(ids: &[String]) -> Vec<i64> {
    ids.iter().filter_map(|id| row_id(id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_are_plain_integers() {
        assert_eq!(id_list(&[1, 22, 333]), "(1,22,333)");
    }

    #[test]
    fn only_plain_decimal_ids_are_row_ids() {
        assert_eq!(row_id("42"), Some(42));
        assert_eq!(row_id("-1"), None);
        assert_eq!(row_id("1-0"), None);
        assert_eq!(row_id("99999999999999999999"), None);
        assert_eq!(
            numeric_ids(&["1".into(), "x".into(), "3".into()]),
            vec![1, 3]
        );
    }
}
