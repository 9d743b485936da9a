//! The name an operator most likely meant when they wrote one the agent does not know: the known
//! name at the smallest edit distance (insertions, deletions, substitutions and swaps of two
//! neighbours each count one; case is ignored), for "did you mean" in refusals.

/// The candidate nearest to `word`, if one is within a third of its length (at least 2 edits):
/// a typo, not a different word.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let most = (word.chars().count() / 3).max(2);
    closest(word, candidates)
        .filter(|(_, distance)| *distance <= most)
        .map(|(name, _)| name)
}

/// The candidate nearest to `word` however far, with its distance; the first of equals wins.
pub fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<(&'a str, usize)> {
    candidates
        .into_iter()
        .map(|candidate| (candidate, distance(word, candidate)))
        .min_by_key(|(_, distance)| *distance)
}

/// The optimal string alignment distance between `a` and `b`, ignoring ASCII case.
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    // Three rows of the matrix: two back (for swaps), one back, and the current one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_typo_costs_one_edit() {
        assert_eq!(distance("APPROVE", "APROVE"), 1, "a letter left out");
        assert_eq!(distance("memory", "memroy"), 1, "two letters swapped");
        assert_eq!(distance("interval", "intervel"), 1, "a letter replaced");
        assert_eq!(
            distance("Reboot", "rebooot"),
            1,
            "a letter doubled, case ignored"
        );
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }

    #[test]
    fn the_nearest_name_is_a_typo_away_or_none() {
        let names = ["poll.interval", "imds.timeout", "imds.url"];
        assert_eq!(nearest("poll.intervl", names), Some("poll.interval"));
        assert_eq!(nearest("imds.urls", names), Some("imds.url"));
        assert_eq!(nearest("something.else", names), None);
        assert!(closest("something.else", names).is_some(), "however far");
    }
}
