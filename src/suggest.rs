//! "Did you mean": the closest of the valid names to a misspelt one.

/// The candidate closest to `word` (case-insensitively), if it is close
/// enough to be a likely typo: at most a third of its letters differ.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&word, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d > 0 && *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance (an adjacent swap counts as one edit).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_word_and_strangers_find_none() {
        let keys = [
            "token_file",
            "timeout",
            "format.null_value",
            "min_group_rows",
        ];
        assert_eq!(did_you_mean("tokenfile", &keys), Some("token_file"));
        assert_eq!(did_you_mean("timeuot", &keys), Some("timeout"));
        assert_eq!(
            did_you_mean("format.null_valeu", &keys),
            Some("format.null_value")
        );
        assert_eq!(did_you_mean("colour", &keys), None);
        assert_eq!(did_you_mean("TABEL", &["TABLE"]), Some("TABLE"));
    }
}
