//! Issue 54, attacked a fourth time from outside: secure aggregation after
//! the fixes of the third review, by a hostile coordinator that drives
//! honest in-process sites through the `Site` trait with hand-made
//! messages (the harness of `attack54b.rs`).
//!
//! A test named `holds_…` asserts what stops an attack; `break_…` asserts
//! that the secret the coordinator recovers equals the true value.
//! 1. One-sided masking in a sparse round (BREAK, high): the step-4 check
//!    "a listed neighbour shared with me" is made only by sites that
//!    sign, so the coordinator may let a listed *non-signer* mask with a
//!    chosen subset only, and use it as a bridge in step 5's graph walk
//!    without any mask across it: the sum of 12 of 101 sites (t = 51);
//!    with `secure_dp_count`, 12/51 of the target noise.
//! 2. Peer-signed keys replayed from a finished session under a reused
//!    session id: the identity signature binds the session id only, so a
//!    site's peers check accepts its peers' stale keys (whose owners have
//!    forgotten the secrets). Held at step 3: no envelope can be sealed
//!    from a stale key, so the site masks with no one and refuses.
//! 3. Two encoders with one digest (BREAK, critical): the signed view
//!    binds `encoder_digest`, a hash of the plan's display text, where a
//!    string literal is shown unescaped; the others are sent a filter on
//!    one string that spells out the rest of the victim's predicate, keep
//!    no rows, and sign the victim's view: one site's exact secure_sum.

use crate::attack54f::rebuild;
use crate::hostile::{Hostile, SUM_SQL, first_words, ring_order, session_of};

use fedsql::protocol::encoder::Encoder;
use fedsql::protocol::secure::{
    MaskRequest, ParticipantKeys, Revealed, RevealedKind, SecureSession, ShareEnvelope, graph,
    masks, shamir,
};
use fedsql::protocol::site::Site;
use fedsql::site::release::dp::DpPolicy;
use fedsql::site::release::policy::DisclosurePolicy;
use fedsql::site::release::secure::encoder_digest;

// ---------------------------------------------------------------------
// 1. One-sided masking in a sparse round.
// ---------------------------------------------------------------------

/// What the one-sided attack recovered: the unmasked first `k` words of
/// the carved-out set's states, the set, and the survivors.
struct OneSided {
    leaked: Vec<u64>,
    set: Vec<usize>,
    listed: usize,
    signers: usize,
}

/// The one-sided attack on a sparse round (101 sites, degree 20, each
/// site's Shamir threshold 11 of its 21, t = 51). The coordinator knows
/// the ring (drawn from the session id). At ring positions:
/// - 0–10, the *core*: 11 sites, each within 10 of every other (so each
///   is a neighbour of the 10 others); they sign;
/// - 11, the *bridge*: listed, does not sign; in step 3 it is relayed only
///   the core's envelopes, so it masks with the core alone;
/// - 12–20 and 91–100: "dropped at setup" (19 sites; no keys), every other
///   neighbour of the core;
/// - 21–90: the rest, listed, all sign; they get every envelope, the
///   bridge's too (site 21 is the bridge's neighbour and masks with it —
///   a mask in site 21's state alone).
///
/// Every check passes: each signer's listed neighbours did share with it
/// (the bridge shared with the core and with 21), the list has 82 ≥ t and
/// 81 signers, and the graph walk of step 5 reaches all 82 survivors (the
/// core links to 21–90 through the bridge). But the bridge masked with
/// the core only: the core and the bridge (12 sites) hold no pairwise
/// mask with anyone outside. Their self seeds are all revealed — each
/// core site's by the 10 other core sites and itself (a signer reveals
/// its own share too), the bridge's by the 10 core sites next to it and
/// site 21 — and the sum of 12 masked states, less 12 self masks, is the
/// sum of 12 of 101 sites.
async fn one_sided_attack(
    h: &Hostile,
    k: usize,
    session: SecureSession,
) -> Result<OneSided, String> {
    let n = h.sites.len();
    // Step 1 with every site, and the coin toss: only then is the ring
    // known; the "dropped" sites then send no shares.
    let mut keys: Vec<Option<ParticipantKeys>> = Vec::with_capacity(n);
    let mut all_group_keys = Vec::new();
    for c in 0..n {
        let (key, g) = h.setup(c, &session).await;
        keys.push(Some(key));
        all_group_keys.push(g);
    }
    crate::support::graph_nonces(&h.sites, |c| h.req(c), &session, &keys).await;
    let order = ring_order(&session);
    let core: Vec<usize> = order[..=10].to_vec();
    let bridge = order[11];
    let dropped: Vec<usize> = order[12..=20]
        .iter()
        .chain(&order[n - 10..])
        .copied()
        .collect();
    let taking_part: Vec<usize> = (0..n).filter(|c| !dropped.contains(c)).collect();
    let group_keys: Vec<_> = taking_part
        .iter()
        .map(|&c| all_group_keys[c].clone())
        .collect();
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let mut envelopes = Vec::new();
    for &c in &taking_part {
        envelopes.extend(h.share(c, &session, keys.clone()).await?);
    }
    let mut words = vec![Vec::new(); n];
    for &c in &taking_part {
        let mine: Vec<ShareEnvelope> = envelopes
            .iter()
            .filter(|e| e.to as usize == c)
            .filter(|e| c != bridge || core.contains(&(e.from as usize)))
            .cloned()
            .collect();
        let request = MaskRequest {
            session: session.clone(),
            envelopes: mine,
            groups: groups.clone(),
        };
        let state = h.sites[c]
            .encode_masked(&h.req(c), &request)
            .await
            .map_err(|e| format!("site {c} refused to mask: {e}"))?;
        words[c] = first_words(state.batch(), k);
    }
    let list: Vec<u32> = taking_part.iter().map(|&c| c as u32).collect();
    let signers: Vec<usize> = taking_part
        .iter()
        .copied()
        .filter(|&c| c != bridge)
        .collect();
    let mut signatures = Vec::new();
    for &c in &signers {
        signatures.push(h.confirm(c, &session, &list).await?);
    }
    let mut revealed: Vec<Revealed> = Vec::new();
    for &c in &signers {
        revealed.extend(h.unmask(c, &session, &list, signatures.clone()).await?);
    }
    let nb = graph::neighbours(&session, &crate::support::graph_seed(&session));
    let set: Vec<usize> = core.iter().copied().chain([bridge]).collect();
    // No site of the set masked with a listed site outside it: the core's
    // neighbours are the core, the bridge and dropped sites; the bridge
    // opened the core's envelopes only.
    for &a in &core {
        assert!(nb[a].iter().all(|j| set.contains(j) || dropped.contains(j)));
    }
    let mut word = vec![0u64; k];
    for &a in &set {
        for (w, x) in word.iter_mut().zip(&words[a]) {
            *w = w.wrapping_add(*x);
        }
    }
    for &a in &set {
        let shares: Vec<shamir::Share> = revealed
            .iter()
            .filter(|r| r.of as usize == a && r.kind == RevealedKind::SelfSeed)
            .map(|r| r.share)
            .collect();
        let st = graph::share_threshold(&session, nb[a].len() + 1);
        let seed = rebuild(&shares, st, "a set site's self seed");
        assert_eq!(
            masks::self_commitment(&session.id, &seed),
            keys[a].unwrap().self_commitment
        );
        masks::apply_self(&mut word, &seed, &session.id, false);
    }
    Ok(OneSided {
        leaked: word,
        set,
        listed: list.len(),
        signers: signers.len(),
    })
}

/// BREAK (severity: high; the sparse round's promise of no sum over fewer
/// than t sites). 101 honest sites with identity keys and peers; the
/// coordinator learns the exact secure_sum of 12 of them (t = 51). See
/// [`one_sided_attack`]: the step-4 check "every listed neighbour shared
/// with me" is made by signers only, and a listed site that does not sign
/// may have been relayed any subset of its neighbours' envelopes (enough
/// for its neighbourhood threshold). So a listed non-signer can stand as
/// a *bridge* in the graph walk of step 5 without masking across it.
///
/// Where a site should refuse: `ClientSecrets::unmask`, the graph walk,
/// counts every link between listed sites as a mask; it should count only
/// links both ends attest. Fix: each signer signs, in its view or beside
/// the list, the set of sites it masked with (`masked_with`); a revealer
/// walks only edges whose both ends are signers that list each other (a
/// non-signer is a dead end, or may not be listed at all in a sparse
/// round), and needs t sites in that component. (In a full round the
/// strict majority of t already stops this: 10 partners and 11 revealers
/// per site do not fit in n < 2t.)
///
/// FIXED since: in a sparse round every listed site must sign (each
/// signer checked that its listed neighbours masked with it), else no site
/// reveals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_one_sided_masking_in_a_sparse_round_gives_the_sum_of_12_of_101_sites() {
    // Peered sites (t = 68; a full round of 101, as a neighbourhood sized
    // against a third of colluders reaches every other site) refuse at
    // masking: the core's sites keep 12 of the 68 they need.
    let peered = Hostile::new(101, None, SUM_SQL, true).await;
    let err = one_sided_attack(&peered, 1, session_of(101))
        .await
        .err()
        .expect("refused");
    assert!(
        err.contains(
            "12 sites of this one's neighbourhood would take part, fewer than its threshold 68"
        ),
        "{err}"
    );
    drop(peered);
    // Sites without peers (t = 51, a sparse round): the all-sign rule of
    // step 5.
    let h = Hostile::new(101, None, SUM_SQL, false).await;
    let majority = crate::attack54f::majority_session_of(101);
    let err = match one_sided_attack(&h, 1, majority).await {
        Err(e) => e,
        Ok(got) => panic!(
            "the {} sites' sum came out: {} (listed {}, signed {})",
            got.set.len(),
            got.leaked[0],
            got.listed,
            got.signers
        ),
    };
    assert!(
        err.contains("every survivor must sign the survivor list over the same view; 81 of 82 did"),
        "{err}"
    );
}

/// BREAK (severity: high, the DP promise). The same against
/// `secure_dp_count` grouped by a declared public `g` (50 values): the 12
/// sites' counts come out with 12 noise shares calibrated for t = 51,
/// 12/51 of one draw of the target noise. A full draw (ε = 1, Δ = 1) is 0
/// with probability 0.46; 12/51 of one is 0 with probability about 0.81:
/// at least 30 of the 50 leaked counts are exact. FIXED since, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_one_sided_masking_releases_a_dp_count_with_a_fraction_of_the_noise() {
    let mut policy = DpPolicy::default();
    let domain: Vec<String> = (0..50).map(|g| g.to_string()).collect();
    policy.set("dp_domain.g", &domain.join(",")).unwrap();
    let h = Hostile::new(
        101,
        Some(&policy),
        "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g",
        false,
    )
    .await;
    let majority = crate::attack54f::majority_session_of(101);
    let err = one_sided_attack(&h, 50, majority)
        .await
        .err()
        .expect("the 12 sites' counts stay masked");
    assert!(err.contains("every survivor must sign"), "{err}");
}

// ---------------------------------------------------------------------
// 2. Peer-signed keys replayed under a reused session id.
// ---------------------------------------------------------------------

/// HOLDS. The review found that after an honest round of five peered
/// sites a coordinator could set up the same session id at site 0 again
/// (the site had forgotten it) and relay the other four sites' keys of the
/// finished round, each signed by a listed peer for this id (the identity
/// signature binds the id and the keys, not the round): site 0's peers
/// check passed, though no old envelope opened to its new keys, so the
/// stale keys only inflated its count of participants at step 2.
/// Hardened since: a site refuses a session id it set up before, so the
/// second setup itself is refused now.
#[tokio::test]
async fn holds_a_reused_session_id_is_refused_at_its_second_setup() {
    let h = Hostile::new(5, None, SUM_SQL, true).await;
    let session = session_of(5);
    let mut keys = Vec::new();
    let mut group_keys = Vec::new();
    for c in 0..5 {
        let (k, g) = h.setup(c, &session).await;
        keys.push(Some(k));
        group_keys.push(g);
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let mut envelopes = Vec::new();
    for c in 0..5 {
        envelopes.extend(h.share(c, &session, keys.clone()).await.unwrap());
    }
    for c in 0..5 {
        let mine: Vec<ShareEnvelope> = envelopes
            .iter()
            .filter(|e| e.to as usize == c)
            .cloned()
            .collect();
        h.mask(c, &session, mine, &groups).await.unwrap();
    }
    let list: Vec<u32> = (0..5).collect();
    let mut signatures = Vec::new();
    for c in 0..5 {
        signatures.push(h.confirm(c, &session, &list).await.unwrap());
    }
    for c in 0..5 {
        h.unmask(c, &session, &list, signatures.clone())
            .await
            .unwrap();
    }
    // The id again at site 0: refused at the setup.
    let err = h.sites[0]
        .secure_setup(&h.req(0), &session)
        .await
        .expect_err("a second setup under a used session id")
        .to_string();
    assert!(err.contains("a session id is used once"), "{err}");
}

// ---------------------------------------------------------------------
// 3. Two encoders with one digest: a string literal that spells out the
//    rest of another plan's text.
// ---------------------------------------------------------------------

/// A round run honestly over each site's own encoder (`h.encoders`): every
/// envelope delivered, the one full list signed by all and every
/// signature shown to all; the coordinator then removes every site's self
/// mask. Returns the unmasked first word (a `secure_sum`'s sum).
async fn honest_total(h: &Hostile) -> Result<u64, String> {
    let n = h.sites.len();
    let session = session_of(n);
    let t = session.threshold;
    let mut keys = Vec::new();
    let mut group_keys = Vec::new();
    for c in 0..n {
        let (k, g) = h.setup(c, &session).await;
        keys.push(Some(k));
        group_keys.push(g);
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let mut envelopes = Vec::new();
    for c in 0..n {
        envelopes.extend(h.share(c, &session, keys.clone()).await?);
    }
    let mut total = 0u64;
    for c in 0..n {
        let mine: Vec<ShareEnvelope> = envelopes
            .iter()
            .filter(|e| e.to as usize == c)
            .cloned()
            .collect();
        total = total.wrapping_add(h.mask(c, &session, mine, &groups).await?);
    }
    let list: Vec<u32> = (0..n as u32).collect();
    let mut signatures = Vec::new();
    for c in 0..n {
        signatures.push(h.confirm(c, &session, &list).await?);
    }
    let mut revealed = Vec::new();
    for c in 0..n {
        revealed.extend(h.unmask(c, &session, &list, signatures.clone()).await?);
    }
    for (c, k) in keys.iter().enumerate() {
        let shares: Vec<shamir::Share> = revealed
            .iter()
            .filter(|r| r.of as usize == c && r.kind == RevealedKind::SelfSeed)
            .map(|r| r.share)
            .collect();
        let seed = rebuild(&shares, t, "a self seed");
        assert_eq!(
            masks::self_commitment(&session.id, &seed),
            k.unwrap().self_commitment
        );
        let mut word = [total];
        masks::apply_self(&mut word, &seed, &session.id, false);
        total = word[0];
    }
    Ok(total)
}

/// The victim's query keeps every row: `CAST(x + g AS VARCHAR) = 'q' OR
/// CAST(x AS VARCHAR) <> 'r'` (x and g are numbers; two different casts,
/// so that the optimizer's common subexpressions do not change the text).
const VICTIM_SQL: &str = "SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE CAST(x + g AS VARCHAR) = 'q' OR CAST(x AS VARCHAR) <> 'r'";

/// The others' query: one comparison with a string that spells out, as
/// the plan's text shows it, the rest of the victim's predicate. It keeps
/// no row; its text (and so its digest) is the victim's.
async fn quiet_twin(h: &Hostile) -> (Encoder, String) {
    let text = h.encoders[0].plan().display_indent_schema().to_string();
    let start = text.find("q\")").expect("the victim's literal 'q'");
    let end = start + text[start..].find("r\")").expect("the literal 'r'") + 1;
    let spelled = text[start..end].replace('\'', "''");
    let quiet = h
        .plan_encoder(&format!(
            "SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE CAST(x + g AS VARCHAR) = '{spelled}'"
        ))
        .await;
    (quiet, text)
}

/// BREAK (severity: critical; the fix of the third review's break 2
/// bypassed). The view a survivor signs binds `encoder_digest`, the
/// SHA-256 of the plan's *display text* (`display_indent_schema`). That
/// text is not injective: a string literal is shown as `Utf8("…")` with
/// no escaping, so a literal can spell out any continuation of the plan.
/// The coordinator sends the victim (site 0) a query that keeps all its
/// rows (`CAST(x + g AS VARCHAR) = 'q' OR CAST(x AS VARCHAR) <> 'r'`) and the
/// four other sites one comparison with the string
/// `q") OR CAST(t.x AS …) != …("r` — which keeps none of their rows and
/// shows the very same text. Every view is equal, every site signs and
/// reveals, and the unmasked total is site 0's exact secure_sum. Five
/// honest peered sites under a worker's default disclosure policy.
///
/// Where a site should refuse: nothing at the site can tell; the digest
/// must be injective. `consistency::encoder_digest` should hash a
/// canonical encoding of the plan (the encoder's serialized bytes as the
/// worker received them — datafusion-proto / the codec — or a
/// length-prefixed walk of the tree with each literal's type and bytes),
/// not its display.
///
/// FIXED since: the digest adds, length-prefixed, every node's fields and
/// every literal's type and value; the two plans' digests differ and the
/// sites refuse to unmask.
#[tokio::test]
async fn break_a_string_literal_that_spells_out_another_plan_gives_one_sites_exact_secure_sum() {
    let mut h =
        Hostile::with_policy(5, None, VICTIM_SQL, true, Some(DisclosurePolicy::default())).await;
    let (quiet, text) = quiet_twin(&h).await;
    assert_ne!(quiet.plan(), h.encoders[0].plan(), "two different plans");
    assert_eq!(
        quiet.plan().display_indent_schema().to_string(),
        text,
        "the same text"
    );
    assert_ne!(
        encoder_digest(quiet.plan()).unwrap(),
        encoder_digest(h.encoders[0].plan()).unwrap(),
        "the digest tells them apart (their literals differ)"
    );
    for c in 1..5 {
        h.encoders[c] = quiet.clone();
    }
    let err = honest_total(&h).await.expect_err("the views differ");
    assert!(err.contains("site 0 refused to unmask"), "{err}");
}
