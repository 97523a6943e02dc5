//! Issue 54, attacked a third time from outside: secure aggregation after
//! the fixes of the second review (the signed view, canonical group
//! lists, the sparse-graph component check), by a hostile coordinator that
//! drives honest in-process sites through the `Site` trait with hand-made
//! messages, and by a hostile analyst writing SQL.
//!
//! A test named `holds_…` asserts the refusal of a defence that holds;
//! `limit_…` shows what the protocol cannot stop (documented in the
//! security book). The breaks this review found were fixed after it, and
//! their attacks now assert what stops them:
//! 1. a survivor reveals by the signed list alone (self seeds of listed
//!    sites, mask keys of the others), whichever signatures it is shown;
//! 2. the signed view binds the digest of the encoder each site ran;
//! 3. the coordinator refuses a secure aggregate that reads `_client`
//!    (and the sites' views would differ anyway); the filter on a data
//!    column is a limit (`limit_…` below): only DP protects a site's value
//!    from such a query.
//!
//! The breaks found:
//! 1. Selective signatures (critical). In step 5 a survivor reveals a
//!    site's self-seed share if that site's list signature is among those
//!    the request carries, its mask-key share if not — and the coordinator
//!    picks, per revealer, which of the valid signatures it shows. All
//!    sites sign the one list, no site drops out, and still: the sum of
//!    two of five sites (t = 3), one site's exact state from three such
//!    sessions, and in a sparse round of 101 sites one site's exact state
//!    in one session; with `secure_dp_…`, totals with 2/3 or 1/51 of the
//!    target noise.
//! 2. The encoder is not in the signed view (critical). The coordinator
//!    sends the victim the analyst's query and every other site a query
//!    that keeps no rows (or a plain `secure_count` where the victim runs
//!    `secure_dp_count`): one honest round then unmasks the victim's state
//!    alone, or its DP counts with only its own noise share.
//! 3. A filter on `_client` (medium; a hostile analyst, an honest
//!    coordinator): `WHERE _client = 'site0'` gives one site's exact
//!    `secure_sum`; only `GROUP BY _client` is withheld. The same with a
//!    filter on a data column only one site has a value of (`WHERE g = 3`
//!    or `CASE WHEN g = 3 …`) where `GROUP BY g` is withheld.

use crate::hostile::{Hostile, SUM_SQL, first_words, plain_sum, schema, session_of, site_rows};
use std::collections::BTreeSet;

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use fedsql::FedContext;
use fedsql::protocol::secure::consistency::{ConfirmRequest, ListSignature};
use fedsql::protocol::secure::{
    MaskRequest, ParticipantKeys, Revealed, RevealedKind, SecureSession, ShareEnvelope,
    ShareRequest, graph, masks, shamir,
};
use fedsql::protocol::site::Site;
use fedsql::site::release::dp::DpPolicy;
use fedsql::site::release::policy::DisclosurePolicy;

/// A round run exactly as an honest coordinator runs it up to step 4:
/// every site set up, shared, masked with every other (every envelope
/// delivered, the canonical group list) and signed the one full survivor
/// list. What the coordinator holds then.
struct Signed {
    session: SecureSession,
    keys: Vec<Option<ParticipantKeys>>,
    /// Each site's masked words (the first `k` of its first secure column).
    words: Vec<Vec<u64>>,
    list: Vec<u32>,
    signatures: Vec<ListSignature>,
}

async fn honest_until_signed(h: &Hostile, session: SecureSession, k: usize) -> Signed {
    let n = h.sites.len();
    let mut keys = Vec::new();
    let mut group_keys = Vec::new();
    for c in 0..n {
        let s = h.sites[c]
            .secure_setup(&h.req(c), &session)
            .await
            .unwrap_or_else(|e| panic!("site {c} refused the setup: {e}"));
        keys.push(Some(s.keys));
        group_keys.push(s.group_keys);
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let nonces = crate::support::graph_nonces(&h.sites, |c| h.req(c), &session, &keys).await;
    let share = ShareRequest {
        session: session.clone(),
        keys: keys.clone(),
        nonces,
    };
    let mut envelopes: Vec<ShareEnvelope> = Vec::new();
    for c in 0..n {
        envelopes.extend(
            h.sites[c]
                .secure_share(&h.req(c), &share)
                .await
                .unwrap_or_else(|e| panic!("site {c} refused to share: {e}")),
        );
    }
    let mut words = Vec::new();
    for c in 0..n {
        let request = MaskRequest {
            session: session.clone(),
            envelopes: envelopes
                .iter()
                .filter(|e| e.to as usize == c)
                .cloned()
                .collect(),
            groups: groups.clone(),
        };
        let state = h.sites[c]
            .encode_masked(&h.req(c), &request)
            .await
            .unwrap_or_else(|e| panic!("site {c} refused to mask: {e}"));
        words.push(first_words(state.batch(), k));
    }
    let list: Vec<u32> = (0..n as u32).collect();
    let confirm = ConfirmRequest {
        session: session.clone(),
        survivors: list.clone(),
    };
    let mut signatures = Vec::new();
    for c in 0..n {
        signatures.push(
            h.sites[c]
                .secure_confirm(&h.req(c), &confirm)
                .await
                .unwrap_or_else(|e| panic!("site {c} refused to sign: {e}")),
        );
    }
    Signed {
        session,
        keys,
        words,
        list,
        signatures,
    }
}

/// Step 5, where the coordinator shows each revealer `r` only the
/// signatures of the sites `shown(r)` (all of them valid signatures of the
/// one list every site signed). Returns every share revealed.
async fn reveal_selectively(
    h: &Hostile,
    s: &Signed,
    shown: impl Fn(usize) -> BTreeSet<usize>,
) -> Result<Vec<Revealed>, String> {
    let mut revealed = Vec::new();
    for r in 0..h.sites.len() {
        let mine = shown(r);
        let signatures: Vec<ListSignature> = s
            .signatures
            .iter()
            .filter(|sig| mine.contains(&(sig.from as usize)))
            .copied()
            .collect();
        revealed.extend(h.unmask(r, &s.session, &s.list, signatures).await?);
    }
    Ok(revealed)
}

/// The plain sum over `target` of its sites' words, from their masked
/// words and the shares revealed: their self seeds, and the mask key of
/// every other site linked to one of them. Fails if a secret lacks shares.
fn unmask_target(s: &Signed, revealed: &[Revealed], target: &[usize]) -> Result<Vec<u64>, String> {
    let session = &s.session;
    let n = session.clients.len();
    let nb = graph::neighbours(session, &crate::support::graph_seed(session));
    let st = |of: usize| graph::share_threshold(session, nb[of].len() + 1);
    let collect = |of: usize, kind: RevealedKind| -> Vec<shamir::Share> {
        let mut shares: Vec<shamir::Share> = revealed
            .iter()
            .filter(|r| r.of as usize == of && r.kind == kind)
            .map(|r| r.share)
            .collect();
        shares.sort_by_key(|sh| sh.x);
        shares.dedup_by_key(|sh| sh.x);
        shares
    };
    let keys: Vec<ParticipantKeys> = s.keys.iter().map(|k| k.unwrap()).collect();
    let k = s.words[target[0]].len();
    let mut word = vec![0u64; k];
    for &a in target {
        for (w, x) in word.iter_mut().zip(&s.words[a]) {
            *w = w.wrapping_add(*x);
        }
    }
    for &a in target {
        let shares = collect(a, RevealedKind::SelfSeed);
        if shares.len() < st(a) {
            return Err(format!(
                "only {} self-seed shares of {a}, {} needed",
                shares.len(),
                st(a)
            ));
        }
        let seed = shamir::combine(&shares[..st(a)]).ok_or("seed shares do not combine")?;
        assert_eq!(
            masks::self_commitment(&session.id, &seed),
            keys[a].self_commitment,
            "the rebuilt self seed of {a} matches its commitment"
        );
        masks::apply_self(&mut word, &seed, &session.id, false);
    }
    for o in (0..n).filter(|c| !target.contains(c)) {
        let linked: Vec<usize> = target
            .iter()
            .copied()
            .filter(|a| nb[o].contains(a))
            .collect();
        if linked.is_empty() {
            continue;
        }
        let shares = collect(o, RevealedKind::MaskKey);
        if shares.len() < st(o) {
            return Err(format!(
                "only {} mask-key shares of {o}, {} needed",
                shares.len(),
                st(o)
            ));
        }
        let secret = shamir::combine(&shares[..st(o)]).ok_or("key shares do not combine")?;
        let secret = x25519_dalek::StaticSecret::from(secret);
        assert_eq!(
            x25519_dalek::PublicKey::from(&secret).to_bytes(),
            keys[o].mask_key,
            "the rebuilt mask key of {o} matches its public key"
        );
        for &a in &linked {
            let seed = masks::pairwise_seed(&secret, &keys[a].mask_key, &session.id).unwrap();
            // a added the mask it shares with o if a < o: take it away.
            masks::apply_pairwise(&mut word, &seed, !masks::adds(a, o));
        }
    }
    Ok(word)
}

// ---------------------------------------------------------------------
// BREAK 1: which shares a survivor reveals depends on which signatures
// the coordinator chooses to show it.
// ---------------------------------------------------------------------

/// The selective-signature attack on a full round of five sites (t = 3)
/// for the pair `a`, `b`. Every site signs the one list [0..5] honestly.
/// In step 5 a survivor reveals, for each site it holds shares of, the
/// self-seed share if that site's signature is among those *shown to it*,
/// the mask-key share if not (`ClientSecrets::unmask`: `if
/// signers.contains(&of)`). The coordinator has all five signatures and
/// shows each revealer a different subset of t of them (its own always
/// in it): a and b to everyone, plus one third site per revealer (c for
/// each other site c; c1 to a, c2 to b). Then a's and b's self seeds come
/// out (five shares each), and each other site's mask key from the three
/// revealers its signature was hidden from. The pairwise mask of a and b
/// cancels in the sum of their two masked states; every other is removed
/// with the other sites' mask keys: the sum of two sites, below t.
async fn pair_attack(h: &Hostile, a: usize, b: usize) -> Result<u64, String> {
    assert_eq!(h.sites.len(), 5);
    let s = honest_until_signed(h, session_of(5), 1).await;
    // Peered sites take t = 4 of 5 (more than two thirds) since the ninth
    // review; the construction shows each revealer t signatures.
    let t = s.session.threshold;
    assert_eq!(t, 4);
    let others: Vec<usize> = (0..5).filter(|c| *c != a && *c != b).collect();
    let shown = |r: usize| -> BTreeSet<usize> {
        let third = if r == a {
            others[0]
        } else if r == b {
            others[1]
        } else {
            r
        };
        let mut set: BTreeSet<usize> = [a, b, third].into_iter().collect();
        for &o in &others {
            if set.len() < t {
                set.insert(o);
            }
        }
        set
    };
    let revealed = reveal_selectively(h, &s, shown).await?;
    Ok(unmask_target(&s, &revealed, &[a, b])?[0])
}

/// BREAK (severity: critical). In a full round of five honest sites with
/// identity keys and `peers` (t = 3 then; 4 now), with no dropout and one survivor
/// list signed by all, the coordinator learns the exact secure_sum of two
/// sites — fewer than the threshold. See [`pair_attack`].
///
/// Where the site should refuse: `ClientSecrets::unmask`
/// (src/site/release/secure/steps.rs) decides self seed vs mask key per
/// site by whether that site's signature was among those the request
/// carries, which the coordinator picks per revealer; the strict-majority
/// argument only holds if every honest revealer makes the same decision.
///
/// FIXED since: every site reveals by the list (all five listed: self
/// seeds only), so no mask key comes out.
#[tokio::test]
async fn break_selective_signatures_unmask_the_sum_of_two_sites_below_the_threshold() {
    let h = Hostile::new(5, None, SUM_SQL, true).await;
    let err = pair_attack(&h, 0, 1).await.expect_err("no pair sum");
    // Since the fifth review, a revealer not shown every listed site's
    // signature refuses outright.
    assert!(err.contains("every survivor must sign"), "{err}");
}

/// BREAK (severity: critical). One peered site's exact state, from three
/// sessions of five honest sites (t = 3) with no dropout: the pair sums
/// of (0, 1), (0, 2) and (1, 2) from [`pair_attack`] give site 0's sum as
/// (s01 + s02 − s12) / 2. Each session is fresh and each site answers each
/// step once per session.
///
/// FIXED since, as above: no pair sum comes out of any session.
#[tokio::test]
async fn break_three_selective_sessions_give_one_peered_sites_exact_state() {
    let h = Hostile::new(5, None, SUM_SQL, true).await;
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let err = pair_attack(&h, a, b).await.expect_err("no pair sum");
        assert!(err.contains("every survivor must sign"), "{err}");
    }
}

/// The same as [`pair_attack`] under a worker's default disclosure policy
/// (k = 5, min_secure_clients = 3), through the `secure_dp_count` of
/// each site's rows: the pair's count carries two noise shares, each of
/// 1/t = 1/3 of a draw — 2/3 of the target noise, below the promise that
/// every total carries a full draw.
///
/// FIXED since, as above.
#[tokio::test]
async fn break_selective_signatures_release_a_dp_count_with_two_thirds_of_the_noise() {
    let mut policy = DpPolicy::default();
    let domain: Vec<String> = (0..100).map(|g| g.to_string()).collect();
    policy.set("dp_domain.g", &domain.join(",")).unwrap();
    let h = Hostile::with_policy(
        5,
        Some(&policy),
        "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g",
        true,
        Some(DisclosurePolicy::default()),
    )
    .await;
    for _ in 0..2 {
        let s = honest_until_signed(&h, session_of(5), 100).await;
        let shown = |r: usize| -> BTreeSet<usize> {
            let third = match r {
                0 => 2,
                1 => 3,
                r => r,
            };
            [0, 1, third].into_iter().collect()
        };
        // Under the policy a refusal says no more than that.
        let err = reveal_selectively(&h, &s, shown)
            .await
            .expect_err("no pair's counts");
        assert!(err.contains("a site could not evaluate the query"), "{err}");
    }
}

// ---------------------------------------------------------------------
// BREAK 2: the same in a sparse round: one site's exact state in ONE
// session.
// ---------------------------------------------------------------------

/// The selective-signature attack on a sparse round (more than 100
/// sites): every site signs the one full list. The coordinator shows
/// - the victim V: every signature but those of V's neighbours, except
///   one neighbour r0 (so that V is linked through r0 to the long arc);
/// - each neighbour r of V: every signature but those of V's other
///   neighbours (r's own and V's kept);
/// - every other site: every signature but those of V's neighbours.
///
/// Each revealer is shown at least 81 of 101 valid signatures (t = 51),
/// its own among them, and the signers it is linked to through the graph
/// (the ring minus V's neighbourhood: an arc of 80) make more than t, so
/// the component check passes. V's signature is shown to everyone: V's
/// self seed comes out; every neighbour k of V is hidden from all its
/// neighbours but itself (and V, for r0): k's mask key comes out. V's
/// masked state then unmasks alone.
async fn sparse_single_site_attack(
    h: &Hostile,
    session: SecureSession,
    v: usize,
    k: usize,
) -> Result<Vec<u64>, String> {
    let n = h.sites.len();
    assert!(graph::session_is_sparse(&session));
    let s = honest_until_signed(h, session, k).await;
    let nb = graph::neighbours(&s.session, &crate::support::graph_seed(&s.session));
    let around: BTreeSet<usize> = nb[v].iter().copied().collect();
    let r0 = nb[v][0];
    let shown = |r: usize| -> BTreeSet<usize> {
        (0..n)
            .filter(|c| !around.contains(c) || *c == r || (r == v && *c == r0))
            .collect()
    };
    let revealed = reveal_selectively(h, &s, shown).await?;
    unmask_target(&s, &revealed, &[v])
}

/// BREAK (severity: critical). In a sparse round of 101 honest sites with
/// identity keys and `peers` (t = 51), no dropout, one list signed by all,
/// the coordinator learns one site's exact secure_sum state in a single
/// session. See [`sparse_single_site_attack`]. The component check added
/// after the second review passes for every revealer.
///
/// FIXED since: the sites reveal by the list (all 101 listed), and in a
/// sparse round only when every listed site's signature is shown. Since
/// the tenth review a peered round of 101 is full (its neighbourhoods are
/// sized against a third of colluders), so the sparse rule is checked
/// with sites without peers (t = 51, neighbourhoods of 21), whose round
/// is sparse; the rule does not depend on peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_sparse_selective_signatures_unmask_one_site_in_one_session() {
    assert!(!graph::session_is_sparse(&session_of(101)));
    let h = Hostile::new(101, None, SUM_SQL, false).await;
    let majority = crate::attack54f::majority_session_of(101);
    let err = sparse_single_site_attack(&h, majority, 7, 1)
        .await
        .expect_err("site 7 stays masked");
    // Shown fewer than every signature, the sites of a sparse round refuse
    // (each must see all listed sites sign); and by the list alone, no mask
    // key of a listed site would come out anyway.
    assert!(err.contains("every survivor must sign"), "{err}");
}

/// BREAK (severity: critical, the DP promise). The same against
/// `secure_dp_count` grouped by a declared public `g` (40 values): site
/// 7's counts come out with its own noise share only, 1/51 of a draw —
/// exact almost always (a full draw, ε = 1: 46%). FIXED since, as above
/// (sites without peers, whose round of 101 is sparse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_sparse_selective_signatures_release_one_sites_dp_counts_nearly_exact() {
    let mut policy = DpPolicy::default();
    let domain: Vec<String> = (0..40).map(|g| g.to_string()).collect();
    policy.set("dp_domain.g", &domain.join(",")).unwrap();
    let h = Hostile::new(
        101,
        Some(&policy),
        "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g",
        false,
    )
    .await;
    let majority = crate::attack54f::majority_session_of(101);
    let err = sparse_single_site_attack(&h, majority, 7, 40)
        .await
        .expect_err("site 7's counts stay masked");
    // Shown fewer than every signature, the sites of a sparse round refuse
    // (each must see all listed sites sign); and by the list alone, no mask
    // key of a listed site would come out anyway.
    assert!(err.contains("every survivor must sign"), "{err}");
}

// ---------------------------------------------------------------------
// The hostile analyst, through an honest coordinator.
// ---------------------------------------------------------------------

/// The first column of a one-row answer as an integer, or the error.
pub(crate) async fn one_value(ctx: &FedContext, sql: &str) -> Result<Option<i64>, String> {
    let batches = ctx
        .sql(sql)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut values = Vec::new();
    for b in &batches {
        let v = datafusion::arrow::compute::cast(b.column(0), &DataType::Int64).unwrap();
        let v = v.as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            values.push((!v.is_null(r)).then(|| v.value(r)));
        }
    }
    assert!(values.len() <= 1, "{sql}: {values:?}");
    Ok(values.into_iter().next().flatten())
}

/// BREAK (severity: medium; a hostile analyst, an honest coordinator).
/// The coordinator withholds `GROUP BY _client` groups (each held by one
/// site, fewer than t), but a *filter* on `_client` gives one site's
/// exact secure_sum in a single query, with no notice: every site binds
/// `_client` to its own name, so at every other site the filter (or the
/// `CASE`) keeps nothing, and the masked total is site 0's state alone.
/// Here under a worker's default disclosure policy (k = 5,
/// min_secure_clients = 3), with identity keys and peers: all five sites
/// take part (their states are zeros), so t is met.
///
/// Where it should be refused: the coordinator knows the encoder reads
/// the virtual column (`client_column::bind_for_any_client` returns
/// `None` for it); a secure aggregate in such an encoder should be refused
/// (or the site should refuse a secure aggregate whose plan filters on, or
/// computes its argument from, a value bound per site, as
/// a site refuses a group by a literal).
///
/// FIXED since: the coordinator refuses a secure aggregate that reads
/// `_client`; a coordinator that did not would send each site its own
/// binding, which the sites' signed views (the encoder's digest) refuse.
#[tokio::test]
async fn break_a_filter_on_client_gives_one_sites_exact_secure_sum() {
    let h = Hostile::with_policy(5, None, SUM_SQL, true, Some(DisclosurePolicy::default())).await;
    for sql in [
        "SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE _client = 'site0'",
        "SELECT secure_sum(CASE WHEN _client = 'site0' THEN x ELSE 0 END, 0, 1000) AS s FROM t",
        "SELECT secure_avg(x, 0, 1000) * secure_count(x) AS s FROM t WHERE _client = 'site3'",
    ] {
        let err = one_value(&h.ctx, sql).await.expect_err(sql);
        assert!(
            err.contains("a secure aggregate cannot read _client"),
            "{sql}: {err}"
        );
    }
}

// ---------------------------------------------------------------------
// BREAK 4: the encoder is not part of what the survivors agree on.
// ---------------------------------------------------------------------

/// Runs one honest round (every step as an honest coordinator runs it,
/// every signature shown to every site) over sites that were sent the
/// encoders in `h.encoders`; the sum over all of them, unmasked.
async fn honest_total(h: &Hostile, k: usize) -> Result<Vec<u64>, String> {
    let n = h.sites.len();
    let s = honest_until_signed(h, session_of(n), k).await;
    let everyone: BTreeSet<usize> = (0..n).collect();
    let revealed = reveal_selectively(h, &s, |_| everyone.clone()).await?;
    let all: Vec<usize> = (0..n).collect();
    unmask_target(&s, &revealed, &all)
}

/// BREAK (severity: critical). A hostile coordinator sends the victim
/// (site 0) the analyst's encoder and every other site the same query
/// with a filter that keeps none of their rows (`WHERE x < 0`): the state
/// layout is the same, every step of the protocol runs honestly (one
/// list, every signature shown to everyone), and the unmasked total is
/// site 0's exact state. Five honest sites under a worker's default
/// disclosure policy (k = 5, min_secure_clients = 3) with identity keys
/// and peers; the policy accepts an empty state.
///
/// Where the site should refuse: nothing a survivor signs in step 4
/// (`consistency::view_digest`: the keys and the group list) binds the
/// encoder it ran, so t signers agree on the keys and the groups, not on
/// the query. `ClientSecrets::setup` should keep a digest of the encoder
/// (its unbound form, before `_client` is bound) and step 4 should sign
/// it in the view, so that a site sent another query is left out (or,
/// with the step-5 fix, the round fails).
///
/// FIXED since: the view each site signs binds its encoder's digest; the
/// sites refuse to unmask (a site's signature over another view does not
/// verify).
#[tokio::test]
async fn break_a_different_encoder_per_site_gives_one_sites_exact_secure_sum() {
    let mut h =
        Hostile::with_policy(5, None, SUM_SQL, true, Some(DisclosurePolicy::default())).await;
    let empty = h
        .plan_encoder("SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE x < 0")
        .await;
    for c in 1..5 {
        h.encoders[c] = empty.clone();
    }
    // Under the disclosure policy the refusal's reason stays at the site
    // (in process: "does not verify"; see attack54b for the full text).
    let err = honest_total(&h, 1).await.expect_err("the views differ");
    assert!(err.contains("site 0 refused to unmask"), "{err}");
    // The control: the same encoder everywhere unmasks the exact sum.
    let same = h.plan_encoder(SUM_SQL).await;
    for c in 0..5 {
        h.encoders[c] = same.clone();
    }
    let total = honest_total(&h, 1).await.unwrap();
    assert_eq!(total[0], (0..5).map(plain_sum).sum::<u64>());
}

/// BREAK (severity: critical, the DP promise). The same with
/// `secure_dp_count` grouped by a declared public `g` (40 values; ε = 1):
/// the victim is sent the analyst's DP query, and the other sites a plain
/// `secure_count` with a filter that keeps nothing — no noise share, a
/// state of the same shape. The unmasked counts are site 0's with only
/// its own noise share, 1/t = 1/3 of one draw: about 80% exact (a full
/// draw: 46%). FIXED since, as above.
#[tokio::test]
async fn break_a_different_encoder_per_site_releases_one_sites_dp_counts_with_a_noise_share() {
    let mut policy = DpPolicy::default();
    let domain: Vec<String> = (0..40).map(|g| g.to_string()).collect();
    policy.set("dp_domain.g", &domain.join(",")).unwrap();
    let mut h = Hostile::with_policy(
        5,
        Some(&policy),
        "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g",
        true,
        Some(DisclosurePolicy::default()),
    )
    .await;
    let quiet = h
        .plan_encoder("SELECT g, secure_count(x) AS n FROM t WHERE x < 0 GROUP BY g")
        .await;
    for c in 1..5 {
        h.encoders[c] = quiet.clone();
    }
    let err = honest_total(&h, 40).await.expect_err("the views differ");
    assert!(err.contains("site 0 refused to unmask"), "{err}");
}

// ---------------------------------------------------------------------
// Defences that hold.
// ---------------------------------------------------------------------

/// Held: in a full round of five sites (t = 3), no choice of shown
/// signatures unmasks one site in one session. The model below applies
/// the rule of the second review's sites (revealer r, shown the
/// signers Σ_r ∋ r with |Σ_r| ≥ t, reveals the self-seed share of every j
/// in Σ_r and the mask-key share of every other j) to all 11^5
/// assignments: site 0 alone needs its self seed (t revealers with 0 in
/// Σ) and the mask key of each of the four others (t revealers each with
/// it outside Σ, itself excluded) — 12 exclusions where five revealers
/// make at most 10. A pair needs 9: possible, as the break above shows.
/// The sites' rule is stricter since: by the list alone since the third
/// review, and since the fifth a revealer not shown every listed site's
/// signature refuses, so the real attempt at site 0 alone below is
/// refused outright.
#[tokio::test]
async fn holds_one_full_round_session_never_unmasks_a_single_site() {
    let n = 5;
    let t = 3;
    // Every Σ_r: r in it, at least t sites.
    let choices: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            (0u8..32)
                .filter(|m| m & (1 << r) != 0 && m.count_ones() as usize >= t)
                .collect()
        })
        .collect();
    let leaks = |target: u8| -> bool {
        let mut pick = [0usize; 5];
        loop {
            let sigma: Vec<u8> = (0..n).map(|r| choices[r][pick[r]]).collect();
            let seeds_ok = (0..n)
                .filter(|a| target & (1 << a) != 0)
                .all(|a| sigma.iter().filter(|s| *s & (1 << a) != 0).count() >= t);
            let keys_ok = (0..n).filter(|o| target & (1 << o) == 0).all(|o| {
                (0..n)
                    .filter(|&r| r != o && sigma[r] & (1 << o) == 0)
                    .count()
                    >= t
            });
            if seeds_ok && keys_ok {
                return true;
            }
            let mut r = 0;
            loop {
                if r == n {
                    return false;
                }
                pick[r] += 1;
                if pick[r] < choices[r].len() {
                    break;
                }
                pick[r] = 0;
                r += 1;
            }
        }
    };
    for v in 0..n {
        assert!(!leaks(1 << v), "site {v} alone");
    }
    assert!(leaks(0b11), "a pair (the break above)");

    let h = Hostile::new(5, None, SUM_SQL, true).await;
    let s = honest_until_signed(&h, session_of(5), 1).await;
    // Site 0's signature shown to all; each other site's hidden from as
    // many revealers as t allows.
    let shown = |r: usize| -> BTreeSet<usize> {
        let mut set: BTreeSet<usize> = [0, r].into_iter().collect();
        for extra in [[1, 2], [3, 4], [3, 4], [1, 2], [1, 2]][r] {
            if set.len() < s.session.threshold {
                set.insert(extra);
            }
        }
        for other in 0..5 {
            if set.len() < s.session.threshold {
                set.insert(other);
            }
        }
        set
    };
    let err = reveal_selectively(&h, &s, shown).await.unwrap_err();
    assert!(err.contains("every survivor must sign"), "{err}");
}

/// Held: a revealer shown fewer than t signatures (its own included), or
/// not its own, refuses and forgets the session.
#[tokio::test]
async fn holds_a_revealer_shown_fewer_than_t_signatures_refuses() {
    let h = Hostile::new(5, None, SUM_SQL, true).await;
    let s = honest_until_signed(&h, session_of(5), 1).await;
    let pick =
        |of: &[usize]| -> Vec<ListSignature> { of.iter().map(|&c| s.signatures[c]).collect() };
    let err = h
        .unmask(0, &s.session, &s.list, pick(&[0, 1]))
        .await
        .unwrap_err();
    assert!(err.contains("fewer than the threshold 4"), "{err}");
    let err = h
        .unmask(1, &s.session, &s.list, pick(&[0, 2, 3, 4]))
        .await
        .unwrap_err();
    assert!(err.contains("own signature missing"), "{err}");
    // Each refusal ends the session at that site.
    let err = h
        .unmask(0, &s.session, &s.list, s.signatures.clone())
        .await
        .unwrap_err();
    assert!(err.contains("no secure session"), "{err}");
}

/// Held (a hostile analyst, an honest coordinator): a `_client` filter on
/// `secure_dp_count` is refused as for `secure_sum` (before this review's
/// fixes it left a full draw of noise: every site adds its share).
#[tokio::test]
async fn holds_a_filter_on_client_leaves_the_noise_of_a_dp_count() {
    let mut policy = DpPolicy::default();
    let domain: Vec<String> = (0..40).map(|g| g.to_string()).collect();
    policy.set("dp_domain.g", &domain.join(",")).unwrap();
    let h = Hostile::with_policy(5, Some(&policy), SUM_SQL, true, None).await;
    let err = one_value(
        &h.ctx,
        "SELECT secure_dp_count(*, 1.0) AS n FROM t WHERE _client = 'site0'",
    )
    .await
    .expect_err("refused");
    assert!(
        err.contains("a secure aggregate cannot read _client"),
        "{err}"
    );
}

/// Site `c`'s rows with `g = c`: every site has a group of its own.
fn own_group_rows(c: usize) -> RecordBatch {
    let rows = site_rows(c);
    let n = rows.num_rows();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![c as i64; n])),
            Arc::clone(rows.column(1)),
        ],
    )
    .unwrap()
}

/// Held (a hostile analyst, an honest coordinator): the coordinator's
/// withholding of groups that fewer than t sites hold cannot be padded by
/// the DP completion of a declared public key (which gives every site
/// every group of the domain). Every site has a `g` of its own: grouped
/// by `g`, `secure_sum` is withheld; mixed with `secure_dp_count` or
/// `dp_count` (so that every site would hold all five groups) the sites
/// refuse the mix.
#[tokio::test]
async fn holds_dp_completion_cannot_pad_the_groups_of_a_secure_sum() {
    let mut policy = DpPolicy::default();
    policy.set("dp_domain.g", "0,1,2,3,4").unwrap();
    let h = Hostile::with_rows(
        5,
        Some(&policy),
        SUM_SQL,
        true,
        Some(DisclosurePolicy::default()),
        own_group_rows,
    )
    .await;
    let batches = h
        .ctx
        .sql("SELECT g, secure_sum(x, 0, 1000) AS s FROM t GROUP BY g")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    let notices = h.ctx.take_notices();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("5 group(s) held by fewer than the threshold of 4 sites")),
        "{notices:?}"
    );
    for dp in ["secure_dp_count(*, 1.0)", "dp_count(*, 1.0)"] {
        let sql = format!("SELECT g, secure_sum(x, 0, 1000) AS s, {dp} AS n FROM t GROUP BY g");
        let err = match h.ctx.sql(&sql).await {
            Ok(df) => df.collect().await.unwrap_err(),
            Err(e) => e,
        }
        .to_string();
        assert!(
            err.contains("may not mix in exact aggregates"),
            "{sql}: {err}"
        );
    }
}

/// LIMIT (a hostile analyst, an honest coordinator; documented in the
/// security book). The same without `_client`: each site has a `g` of its own. `GROUP BY
/// g` is withheld (each group held by one site), but `WHERE g = 3` (or
/// the `CASE` form) gives site 3's exact secure_sum in one query: a round
/// without GROUP BY has no group keys, so the coordinator's withholding
/// (`covered_groups`, which returns early when there are no key columns)
/// never counts how many sites have rows, and the other sites take part
/// with empty states.
///
/// Fix: none in the protocol closes the `CASE` form (every site has rows
/// and contributes zeros): a total over a predicate only one site's rows
/// satisfy is that site's value. Treating a round without GROUP BY as one
/// group (a site with no rows reporting no group key) would stop the
/// `WHERE` form only. The security page should say that the withholding
/// of thin groups is no defence against an analyst who writes filters,
/// and that only DP (`require_dp`) protects a site's value from the
/// analyst; refusing `_client` in secure encoders closes the direct
/// per-site form of the previous test, not this one.
#[tokio::test]
async fn limit_a_filter_on_a_data_column_gives_one_sites_exact_secure_sum() {
    let h = Hostile::with_rows(
        5,
        None,
        SUM_SQL,
        true,
        Some(DisclosurePolicy::default()),
        own_group_rows,
    )
    .await;
    let batches = h
        .ctx
        .sql("SELECT g, secure_sum(x, 0, 1000) AS s FROM t GROUP BY g")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    h.ctx.take_notices();
    for sql in [
        "SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE g = 3",
        "SELECT secure_sum(CASE WHEN g = 3 THEN x ELSE 0 END, 0, 1000) AS s FROM t",
    ] {
        let got = one_value(&h.ctx, sql).await.unwrap();
        assert_eq!(got, Some(plain_sum(3) as i64), "{sql}");
        let notices = h.ctx.take_notices();
        assert!(
            !notices.iter().any(|n| n.contains("not shown")),
            "{notices:?}"
        );
    }
}

/// Steps 1 and 2 with every site: the keys, the canonical group list and
/// the envelopes addressed to each site.
async fn honest_until_shared(
    h: &Hostile,
    session: &SecureSession,
) -> (
    Vec<Option<ParticipantKeys>>,
    RecordBatch,
    Vec<Vec<ShareEnvelope>>,
) {
    let n = h.sites.len();
    let mut keys = Vec::new();
    let mut group_keys = Vec::new();
    for c in 0..n {
        let s = h.sites[c].secure_setup(&h.req(c), session).await.unwrap();
        keys.push(Some(s.keys));
        group_keys.push(s.group_keys);
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let nonces = crate::support::graph_nonces(&h.sites, |c| h.req(c), session, &keys).await;
    let share = ShareRequest {
        session: session.clone(),
        keys: keys.clone(),
        nonces,
    };
    let mut to = vec![Vec::new(); n];
    for c in 0..n {
        for e in h.sites[c].secure_share(&h.req(c), &share).await.unwrap() {
            to[e.to as usize].push(e);
        }
    }
    (keys, groups, to)
}

/// Held: malformed messages are refused with an error, never a panic: a
/// group list of another key type, or with a NULL key; survivor lists and
/// signatures naming places far out of range; a key vector of the wrong
/// length.
#[tokio::test]
async fn holds_malformed_messages_are_refused_without_a_panic() {
    use datafusion::arrow::array::StringArray;
    let h = Hostile::new(
        3,
        None,
        "SELECT g, secure_sum(x, 0, 1000) AS s FROM t GROUP BY g",
        true,
    )
    .await;
    let mask =
        |session: &SecureSession, envelopes: Vec<ShareEnvelope>, groups: RecordBatch| MaskRequest {
            session: session.clone(),
            envelopes,
            groups,
        };
    // A group list of strings where the key is BIGINT.
    let session = session_of(3);
    let (_, _, to) = honest_until_shared(&h, &session).await;
    let strings = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("g", DataType::Utf8, true)])),
        vec![Arc::new(StringArray::from(vec![Some("0")]))],
    )
    .unwrap();
    let err = h.sites[0]
        .encode_masked(&h.req(0), &mask(&session, to[0].clone(), strings))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("schema mismatch"), "{err}");
    // A NULL group key.
    let session = session_of(3);
    let (_, _, to) = honest_until_shared(&h, &session).await;
    let nulls = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("g", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![None, Some(0)]))],
    )
    .unwrap();
    let err = h.sites[0]
        .encode_masked(&h.req(0), &mask(&session, to[0].clone(), nulls))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("contains null values"), "{err}");
    // A survivor list with a place far out of range.
    let session = session_of(3);
    let (_, groups, to) = honest_until_shared(&h, &session).await;
    for (c, mine) in to.iter().enumerate() {
        h.sites[c]
            .encode_masked(&h.req(c), &mask(&session, mine.clone(), groups.clone()))
            .await
            .unwrap();
    }
    let confirm = |survivors: Vec<u32>| ConfirmRequest {
        session: session.clone(),
        survivors,
    };
    let err = h.sites[0]
        .secure_confirm(&h.req(0), &confirm(vec![0, 1, u32::MAX]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sent no keys"), "{err}");
    // A signature from a place far out of range.
    let mut signatures = Vec::new();
    for c in 1..3 {
        signatures.push(
            h.sites[c]
                .secure_confirm(&h.req(c), &confirm(vec![0, 1, 2]))
                .await
                .unwrap(),
        );
    }
    let mut forged = signatures[0];
    forged.from = u32::MAX;
    signatures.push(forged);
    let err = h
        .unmask(1, &session, &[0, 1, 2], signatures)
        .await
        .unwrap_err();
    assert!(err.contains("not on it"), "{err}");
    // A key vector of the wrong length.
    let session = session_of(3);
    let mut keys = Vec::new();
    for c in 0..3 {
        keys.push(Some(
            h.sites[c]
                .secure_setup(&h.req(c), &session)
                .await
                .unwrap()
                .keys,
        ));
    }
    keys.push(None);
    let err = h.sites[0]
        .secure_share(
            &h.req(0),
            &ShareRequest {
                session: session.clone(),
                keys,
                nonces: Vec::new(),
            },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("relayed for 3 clients"), "{err}");
}
