//! The ninth outside attack set (hostile coordinator, colluding sites).
//!
//! 1. **Two survivor lists that share only colluders.** The consistency
//!    round makes every honest survivor sign one list, and a site reveals
//!    only for a list that every listed site signed over its view. The
//!    security page argues that "no two disjoint sets of t sites exist",
//!    so no site's shares come out of both kinds. But a colluding site
//!    (whose identity key the coordinator holds) signs as many lists as
//!    the coordinator likes: two lists L1 = {victim} ∪ P1 ∪ C and
//!    L2 = P2 ∪ C, over the same view, each of at least t sites, need only
//!    n + |C| ≥ 2t — one colluder when n is odd (two when even). The
//!    honest sites of L1 reveal the victim's self-seed shares (it is on
//!    their list), those of L2 its mask-key shares (it is not on theirs),
//!    and the colluders hand over both kinds of the shares the victim
//!    sealed to them: the victim's exact state. In a full round of 5
//!    and a sparse round of 101 (where the coordinator picks, after the
//!    coin toss, a ring neighbour of its colluder as the victim), in
//!    process and over Flight workers. FIXED: a site with `peers` refuses
//!    a threshold of two thirds of the sites or less (and a sparse
//!    round's neighbourhood threshold follows t's share), the
//!    coordinator's default follows; two lists of t > 2n/3 signers then
//!    share more than n/3 sites, so one colluder cannot sign both: honest
//!    sites would have to sign twice, and they sign once.
//! 3. **Manual approval of a flagged request.** A request flagged as a
//!    fit's round was fingerprinted by its aggregates' printed text, and
//!    `a - (b + c)` prints as `(a - b) + c`: another quantity ran under
//!    the approval of the first (FIXED: the structure of the plan with
//!    the fit steps' literal arguments nulled).

use datafusion::arrow::record_batch::RecordBatch;
use fedsql::protocol::secure::consistency;
use fedsql::protocol::secure::masks::SharePair;
use fedsql::protocol::secure::{
    ListSignature, ParticipantKeys, Revealed, RevealedKind, SecureSession, ShareEnvelope,
    ShareRequest, graph, masks, shamir,
};
use fedsql::site::release::identity::SiteIdentity;
use fedsql::site::release::secure::encoder_digest;
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};

use crate::attack54c::one_value;
use crate::attack54f::{Hostile, SUM_SQL, encoder_of, first_word, rebuild, site_sum};
use crate::attack54h::{approved_sum, held_for_approval};

/// A participant the coordinator runs for a colluding site (its data
/// owner handed over its identity key): every secret of its session keys.
pub(crate) struct MadeColluder {
    pub(crate) place: usize,
    pub(crate) mask: StaticSecret,
    pub(crate) cipher: StaticSecret,
    pub(crate) self_seed: [u8; 32],
    pub(crate) list_seed: [u8; 32],
    pub(crate) nonce: [u8; 32],
    pub(crate) keys: ParticipantKeys,
}

pub(crate) fn made_colluder(
    place: usize,
    session: &SecureSession,
    identity: &SiteIdentity,
) -> MadeColluder {
    let mask = StaticSecret::from(rand::random::<[u8; 32]>());
    let cipher = StaticSecret::from(rand::random::<[u8; 32]>());
    let self_seed: [u8; 32] = rand::random();
    let list_seed: [u8; 32] = rand::random();
    let nonce: [u8; 32] = rand::random();
    let mut keys = ParticipantKeys {
        mask_key: PublicKey::from(&mask).to_bytes(),
        cipher_key: PublicKey::from(&cipher).to_bytes(),
        self_commitment: masks::self_commitment(&session.id, &self_seed),
        list_key: consistency::list_public_key(&list_seed),
        graph_commitment: graph::nonce_commitment(&session.id, &nonce),
        signed: None,
    };
    keys.signed = Some(identity.sign(&session.id, &keys.digest()));
    MadeColluder {
        place,
        mask,
        cipher,
        self_seed,
        list_seed,
        nonce,
        keys,
    }
}

/// A round after its setup (and, above 100 sites, its coin toss): every
/// honest site set up, the colluders' keys made, the graph drawn.
pub(crate) struct Opened {
    pub(crate) session: SecureSession,
    pub(crate) keys: Vec<Option<ParticipantKeys>>,
    pub(crate) groups: RecordBatch,
    pub(crate) colluders: Vec<MadeColluder>,
    pub(crate) graph: Vec<Vec<usize>>,
}

impl Opened {
    fn is_colluder(&self, c: usize) -> bool {
        self.colluders.iter().any(|x| x.place == c)
    }

    /// The Shamir threshold of site `c`'s shares.
    pub(crate) fn share_t(&self, c: usize) -> usize {
        graph::share_threshold(&self.session, self.graph[c].len() + 1)
    }
}

/// Steps 1 (and the coin toss) over all of `h`'s sites, `colluding`
/// ones run by the coordinator: every honest site reveals its nonce for
/// the one key vector, so every honest site draws the same graph.
pub(crate) async fn open_round(h: &Hostile, colluding: &[usize]) -> Opened {
    let n = h.sites.len();
    open_session(h, colluding, crate::attack54f::session_of(n)).await
}

/// [`open_round`] of `session` (its threshold the coordinator's choice).
pub(crate) async fn open_session(
    h: &Hostile,
    colluding: &[usize],
    session: SecureSession,
) -> Opened {
    let n = h.sites.len();
    let mut keys = vec![None; n];
    let mut nonces = vec![None; n];
    let mut colluders = Vec::new();
    let mut group_keys = Vec::new();
    for c in 0..n {
        if colluding.contains(&c) {
            let made = made_colluder(c, &session, &h.identities[c]);
            keys[c] = Some(made.keys);
            nonces[c] = Some(made.nonce);
            colluders.push(made);
        } else {
            let (k, g) = h.setup(c, &session).await.unwrap();
            keys[c] = Some(k);
            group_keys.push(g);
        }
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    if graph::session_is_sparse(&session) {
        let reveal = ShareRequest {
            session: session.clone(),
            keys: keys.clone(),
            nonces: Vec::new(),
        };
        for c in (0..n).filter(|c| !colluding.contains(c)) {
            nonces[c] = Some(h.sites[c].secure_reveal(&h.req(c), &reveal).await.unwrap());
        }
        crate::support::remember_nonces(&session, nonces);
    }
    let seed = crate::support::graph_seed(&session);
    let graph = graph::neighbours(&session, &seed);
    Opened {
        session,
        keys,
        groups,
        colluders,
        graph,
    }
}

/// Step 2 of the colluders the coordinator runs in `round`: each splits
/// its mask key and self seed among its neighbours with keys, at its
/// neighbourhood's threshold, and seals each one's pair to it.
pub(crate) fn colluder_envelopes(round: &Opened) -> Vec<ShareEnvelope> {
    let session = &round.session;
    let n = session.clients.len();
    let mut envelopes = Vec::new();
    for x in &round.colluders {
        let near: Vec<usize> = round.graph[x.place]
            .iter()
            .copied()
            .filter(|&j| round.keys[j].is_some())
            .collect();
        let t = round.share_t(x.place);
        let fill = |b: &mut [u8]| {
            for v in b.iter_mut() {
                *v = rand::random();
            }
        };
        let mask_key = shamir::split(&x.mask.to_bytes(), n, t, fill);
        let self_seed = shamir::split(&x.self_seed, n, t, fill);
        for &j in &near {
            let pair = SharePair {
                mask_key: mask_key[j],
                self_seed: self_seed[j],
            };
            envelopes.push(ShareEnvelope {
                from: x.place as u32,
                to: j as u32,
                ciphertext: masks::seal(
                    &x.cipher,
                    &round.keys[j].unwrap().cipher_key,
                    session,
                    (x.place as u32, j as u32),
                    &pair,
                )
                .unwrap(),
            });
        }
    }
    envelopes
}

/// The view every honest site of this round signs (one encoder, one key
/// vector, one group list of an ungrouped aggregate).
pub(crate) fn view_of(h: &Hostile, round: &Opened) -> [u8; 32] {
    let encoder = encoder_digest(h.encoders[0].plan()).unwrap();
    // `groups_digest` of an ungrouped layout: the number of rows only.
    let mut hash = Sha256::new();
    hash.update((round.groups.num_rows() as u64).to_be_bytes());
    let groups: [u8; 32] = hash.finalize().into();
    consistency::view_digest(&encoder, &round.keys, &groups)
}

/// Steps 2 to 5 of [`open_round`]'s round with two survivor lists: the
/// honest sites `side1` (the victim among them) are shown
/// `side1 ∪ colluders`, the honest sites `side2` are shown
/// `side2 ∪ colluders`; every envelope is delivered; each colluder signs
/// both lists; then the victim's self seed comes from side 1 and the
/// colluders, its mask key from side 2 and the colluders. Returns the
/// victim's masked state with every mask removed.
pub(crate) async fn two_lists(
    h: &Hostile,
    round: &Opened,
    victim: usize,
    side1: &[usize],
    side2: &[usize],
) -> Result<u64, String> {
    let session = &round.session;
    let mut honest: Vec<usize> = side1.iter().chain(side2).copied().collect();
    honest.sort_unstable();
    honest.dedup();
    // Step 2.
    let mut envelopes: Vec<ShareEnvelope> = Vec::new();
    for &c in &honest {
        envelopes.extend(h.share(c, session, round.keys.clone()).await?);
    }
    envelopes.extend(colluder_envelopes(round));
    // The colluders open what the victim sealed to them: both kinds.
    let mut from_colluders: Vec<SharePair> = Vec::new();
    for x in &round.colluders {
        if let Some(e) = envelopes
            .iter()
            .find(|e| e.from as usize == victim && e.to as usize == x.place)
        {
            from_colluders.push(
                masks::open(
                    &x.cipher,
                    &round.keys[victim].unwrap().cipher_key,
                    session,
                    (victim as u32, x.place as u32),
                    &e.ciphertext,
                )
                .unwrap(),
            );
        }
    }
    // Step 3: every honest site masks.
    let mut victim_word = 0u64;
    for &c in &honest {
        let mine: Vec<ShareEnvelope> = envelopes
            .iter()
            .filter(|e| e.to as usize == c)
            .cloned()
            .collect();
        let state = h.mask_state(c, session, mine, &round.groups).await?;
        if c == victim {
            victim_word = first_word(&state);
        }
    }
    // Step 4: two lists; each honest site signs its own, each colluder
    // both.
    let list = |side: &[usize]| {
        let mut l: Vec<u32> = side
            .iter()
            .copied()
            .chain(round.colluders.iter().map(|x| x.place))
            .map(|c| c as u32)
            .collect();
        l.sort_unstable();
        l
    };
    let (l1, l2) = (list(side1), list(side2));
    let view = view_of(h, round);
    let mut revealed: Vec<Revealed> = Vec::new();
    for (side, l) in [(side1, &l1), (side2, &l2)] {
        let mut signatures = Vec::new();
        for &c in side {
            signatures.push(h.confirm(c, session, l).await?);
        }
        for x in &round.colluders {
            signatures.push(ListSignature {
                from: x.place as u32,
                signature: consistency::sign_list(&x.list_seed, session, &view, l),
            });
        }
        signatures.sort_by_key(|s| s.from);
        // Step 5.
        for &c in side {
            revealed.extend(h.unmask(c, session, l, signatures.clone()).await?);
        }
    }
    let shares = |kind: RevealedKind| -> Vec<shamir::Share> {
        revealed
            .iter()
            .filter(|r| r.of as usize == victim && r.kind == kind)
            .map(|r| r.share)
            .chain(from_colluders.iter().map(|p| match kind {
                RevealedKind::SelfSeed => p.self_seed,
                RevealedKind::MaskKey => p.mask_key,
            }))
            .collect()
    };
    let t = round.share_t(victim);
    let keys = round.keys[victim].unwrap();
    let self_seed = rebuild(&shares(RevealedKind::SelfSeed), t, "the victim's self seed");
    assert_eq!(
        masks::self_commitment(&session.id, &self_seed),
        keys.self_commitment,
        "the victim's self seed, rebuilt"
    );
    let mask_secret = StaticSecret::from(rebuild(
        &shares(RevealedKind::MaskKey),
        t,
        "the victim's mask key",
    ));
    assert_eq!(
        PublicKey::from(&mask_secret).to_bytes(),
        keys.mask_key,
        "the victim's mask secret, rebuilt"
    );
    // The victim's masked state, unmasked: its self mask, and its pairwise
    // mask with every neighbour that sent it an envelope (all of them).
    let mut word = [victim_word];
    masks::apply_self(&mut word, &self_seed, &session.id, false);
    for &j in &round.graph[victim] {
        let Some(peer) = round.keys[j] else { continue };
        let seed = masks::pairwise_seed(&mask_secret, &peer.mask_key, &session.id).unwrap();
        masks::apply_pairwise(&mut word, &seed, !masks::adds(victim, j));
    }
    Ok(word[0])
}

/// Every honest site of `h` refuses a session over its `n` places at a
/// strict majority; returns the first refusal.
async fn every_site_refuses_a_majority(h: &Hostile) -> String {
    let n = h.sites.len();
    let session = crate::attack54f::majority_session_of(n);
    let mut first = None;
    for c in 0..n {
        let why = h
            .setup(c, &session)
            .await
            .expect_err("a peered site refuses a strict majority");
        first.get_or_insert(why);
    }
    first.unwrap()
}

/// Was BREAK (critical). Five peered sites (every site's identity key
/// listed by every other, a worker's default disclosure policy), ONE of
/// them colluding with the coordinator, t = 3: the victim (0) and site 1
/// were shown the list [0, 1, 4], sites 2 and 3 the list [2, 3, 4], and
/// colluder 4 signed both over the one view all honest sites share. Each
/// list had t = 3 signers, every check of every site passed, each honest
/// site signed and revealed once: sites 0 and 1 revealed the victim's
/// self-seed shares, sites 2 and 3 its mask-key shares, and the colluder
/// held one of each — the victim's exact state in one session. Root
/// cause: the strict-majority argument ("no two disjoint sets of t
/// sites") counts honest signers only; a colluder is in both sets, and
/// two lists of t need only n + c ≥ 2t.
///
/// HOLDS now: a peered site takes t > 2n/3 (4 of 5) and refuses t = 3 at
/// setup, saying why; at t = 4 the two lists need 2t − n = 3 common
/// signers, and with one colluder two of them are honest sites, which
/// sign one list per session: the second list is refused.
#[tokio::test]
async fn holds_one_colluder_signing_two_survivor_lists_peered_sites_refuse_the_majority_and_the_split()
 {
    let h = Hostile::new(5, SUM_SQL).await;
    let why = every_site_refuses_a_majority(&h).await;
    assert!(
        why.contains("a secure sum's threshold 3 over 5 sites: it must be at least 4 (more than two thirds of the sites, as this site checks its peers"),
        "{why}"
    );
    let round = open_round(&h, &[4]).await;
    assert_eq!(round.session.threshold, 4);
    // L1 = [0, 1, 2, 4] (the victim survived), L2 = [1, 2, 3, 4] (it
    // dropped): sites 1 and 2 would have to sign both.
    let err = two_lists(&h, &round, 0, &[0, 1, 2], &[1, 2, 3])
        .await
        .expect_err("one list per site");
    assert!(err.contains("site 1 refused to sign"), "{err}");
}

/// Control (HOLDS): the same split as before the fix, at t = 4 of 5
/// (n + c = 6 < 2t = 8): each list of three is below the threshold, and
/// the first site asked to sign refuses (nothing is signed, so nothing
/// is revealed).
#[tokio::test]
async fn holds_control_a_threshold_above_n_plus_c_over_two_refuses_the_split() {
    let h = Hostile::new(5, SUM_SQL).await;
    let round = open_round(&h, &[4]).await;
    assert_eq!(round.session.threshold, 4);
    let err = two_lists(&h, &round, 0, &[0, 1], &[2, 3])
        .await
        .expect_err("lists below the threshold");
    assert!(err.contains("site 0 refused to sign"), "{err}");
    // Under its disclosure policy the site withholds why (the steps'
    // check: "3 survivors …, fewer than the threshold 4").
    assert!(
        err.contains("a site could not evaluate the query; under a disclosure policy"),
        "{err}"
    );
}

/// Was BREAK (critical), the same against real workers over Flight: four
/// honest `fedsql worker`s with identity keys listing each other as
/// peers, the fifth's identity key in the coordinator's hands.
///
/// HOLDS now: every worker refuses t = 3 at setup; an honest coordinator
/// learns from the workers' schemas that they check their peers and picks
/// t = 4 itself (the sum over all five comes back), and an analyst's
/// `SET fedsql.secure_threshold = 3` is refused with the bound; at t = 4
/// the split needs honest sites to sign twice.
#[tokio::test]
async fn holds_one_colluder_signing_two_survivor_lists_over_the_wire() {
    let dir = tempfile::TempDir::new().unwrap();
    let (_workers, h) = crate::attack54f::hostile_over_workers(dir.path()).await;
    let why = every_site_refuses_a_majority(&h).await;
    assert!(
        why.contains("it must be at least 4 (more than two thirds"),
        "{why}"
    );
    let total: u64 = (0..5).map(site_sum).sum();
    assert_eq!(
        one_value(&h.ctx, SUM_SQL).await.unwrap(),
        Some(total as i64)
    );
    h.ctx.sql("SET fedsql.secure_threshold = 3").await.unwrap();
    let err = one_value(&h.ctx, SUM_SQL).await.unwrap_err();
    assert!(err.contains("more than two thirds of the sites"), "{err}");
    h.ctx.sql("SET fedsql.secure_threshold = 0").await.unwrap();
    let round = open_round(&h, &[4]).await;
    let err = two_lists(&h, &round, 0, &[0, 1, 2], &[1, 2, 3])
        .await
        .expect_err("one list per site");
    assert!(err.contains("site 1 refused to sign"), "{err}");
}

/// Was BREAK (critical). The same in a sparse round of 101 peered sites
/// with ONE colluder, whatever the coin toss: once the graph was drawn,
/// the coordinator picked as its victim the colluder's ring neighbour and
/// split the ring into two arcs of 51 = t that shared only the colluder;
/// the victim's self seed came from one side (its neighbourhood's
/// threshold was 11 of 21), its mask key from the other.
///
/// HOLDS now: t = 68 of 101 (lists of 51 are refused), and since the
/// tenth review's redraws a peered round of 101 is full (a neighbourhood
/// sized against a third of colluders reaches every other site): the
/// victim's shares lie with all 100 others at threshold 68, and two lists
/// of at least 68 must share 35 sites, 34 of them honest, each of which
/// signs one list: the coordinator gets the first list signed (a
/// legitimate round, the victim on it) and not the second (the victim
/// "dropped").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_one_colluder_in_a_round_of_101_peered_sites_cannot_sign_two_lists() {
    let n = 101;
    let h = Hostile::new(n, SUM_SQL).await;
    let x = 7;
    let round = open_round(&h, &[x]).await;
    assert_eq!(round.session.threshold, 68);
    let order = graph::ring_order(n, &crate::support::graph_seed(&round.session));
    let px = order.iter().position(|&s| s == x).unwrap();
    // The site `d` places after the victim on the ring (the colluder at 1).
    let at = |d: usize| order[(px + n - 1 + d) % n];
    let victim = at(0);
    assert_eq!(at(1), x);
    assert!(!graph::session_is_sparse(&round.session));
    let others: Vec<usize> = (0..n).filter(|&c| c != victim).collect();
    assert_eq!(round.graph[victim], others, "a full round");
    assert_eq!(round.share_t(victim), 68);
    assert!(round.is_colluder(x));
    // The old split: two arcs of 51 sites, below t.
    let side1: Vec<usize> = std::iter::once(victim).chain((2..=50).map(at)).collect();
    let side2: Vec<usize> = (51..=100).map(at).collect();
    let err = two_lists(&h, &round, victim, &side1, &side2)
        .await
        .expect_err("lists below the threshold");
    assert!(
        err.contains(&format!("site {victim} refused to sign")),
        "{err}"
    );
    let round = open_round(&h, &[x]).await;
    let order = graph::ring_order(n, &crate::support::graph_seed(&round.session));
    let px = order.iter().position(|&s| s == x).unwrap();
    let at = |d: usize| order[(px + n - 1 + d) % n];
    let victim = at(0);
    // The simplest pair of lists differs in the victim alone: L1 = every
    // site, L2 = every site but the victim.
    let side1: Vec<usize> = (0..n).filter(|&c| c != x).collect();
    let side2: Vec<usize> = (2..=100).map(at).collect();
    let err = two_lists(&h, &round, victim, &side1, &side2)
        .await
        .expect_err("one list per site");
    assert!(
        err.contains(&format!("site {} refused to sign", at(2))),
        "{err}"
    );
}

// ---------------------------------------------------------------------
// 3. Manual approval: a request flagged as a fit's round is fingerprinted
//    by its aggregates' printed text.
// ---------------------------------------------------------------------

/// The demo rows' sum of `f(systolic, age, visits)`.
fn demo_sum(f: impl Fn(f64, f64, f64) -> f64) -> f64 {
    let (header, rows) = crate::support::demo_rows();
    let at = |name: &str| header.split(',').position(|h| h == name).unwrap();
    let (s, a, v) = (at("systolic"), at("age"), at("visits"));
    rows.iter()
        .filter_map(|r| {
            let cells: Vec<&str> = r.split(',').collect();
            let get = |i: usize| cells.get(i).and_then(|c| c.parse::<f64>().ok());
            Some(f(get(s)?, get(a)?, get(v)?))
        })
        .sum()
}

/// Was BREAK (medium; the analyst's own coordinator; FIXED). Under
/// `approval = "manual"` a request flagged as a fit's round
/// (`fit_scope`, the coordinator's flag) is fingerprinted by its
/// aggregates' *printed text* beside its input's structure
/// (`describe(plan, true)`: `join(&aggregates)`), not by the aggregates'
/// structure — though the non-fit fingerprint switched to the plan's
/// datafusion-proto digest precisely because "plans that print alike
/// differ: `x - (x - x)` beside `(x - x) - x`". DataFusion prints a
/// child of equal precedence without parentheses, so
/// `sum(systolic - (age + visits))` prints as
/// `sum(clinic.systolic - clinic.age + clinic.visits)`, the text of the
/// approved `sum((systolic - age) + visits)`. Once the data owner
/// approves the latter as a fit's round, the former — another quantity —
/// runs under the same approval, never shown to the data owner.
///
/// Fix: fingerprint a flagged request's aggregates by structure too
/// (e.g. the encoder digest of the aggregate node with only the fit
/// step's literal arguments replaced by a placeholder), never by text.
#[tokio::test]
async fn holds_approval_a_flagged_requests_aggregates_that_print_alike_are_a_new_request() {
    use fedsql::coordinator::federated_table::FederatedTable;
    use fedsql::protocol::site::Analyst;
    let site = crate::profiles::site("[analysts.bob]\napproval = \"manual\"\n").await;
    let bob = site.session("bob").await;
    let provider = bob.session().table_provider("clinic").await.unwrap();
    let worker = FederatedTable::from_provider(provider.as_ref())
        .unwrap()
        .clients()[0]
        .clone();
    let analyst = Analyst::session();
    // The data owner approves (systolic - age) + visits, as a fit's round.
    let approved = encoder_of(&bob, "SELECT sum(systolic - age + visits) AS s FROM clinic")
        .await
        .in_fit(Some(1));
    let at_approved = approved_sum(&site, &worker, &approved, &analyst).await;
    assert_eq!(at_approved, demo_sum(|s, a, v| s - a + v));
    // Another quantity, printed alike.
    let other_sql = "SELECT sum(systolic - (age + visits)) AS s FROM clinic";
    let other = encoder_of(&bob, other_sql).await;
    // Control: unflagged, it is a new request (its structure differs).
    held_for_approval(&worker, &other, &analyst).await;
    // Flagged as a fit's round: a new request too (FIXED: a flagged
    // request's fingerprint is the structure of its plan with only the fit
    // steps' literal arguments nulled, never the aggregates' text).
    held_for_approval(&worker, &other.in_fit(Some(1)), &analyst).await;
}

// ---------------------------------------------------------------------
// 2. require_secure: a DISTINCT secure aggregate.
// ---------------------------------------------------------------------

/// HOLDS. Under `require_secure`, `secure_count(DISTINCT x)` built by a
/// hostile coordinator (the distinct flag set on the aggregate itself,
/// whose state would be the set of x's distinct values, not a masked
/// word): refused by `Encoder::split`, which a worker runs on every plan
/// it decodes (`calls.rs`), and by `Encoder::try_new` alike.
#[tokio::test]
async fn holds_require_secure_a_distinct_secure_count_is_refused() {
    use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};
    use fedsql::site::release::dp::DpPolicy;
    use fedsql::site::release::policy::DisclosurePolicy;
    use std::sync::Arc;
    let mut dp = DpPolicy::default();
    dp.set("require_secure", "true").unwrap();
    dp.set("dp_domain.g", "0").unwrap();
    let sql = "SELECT secure_count(x) AS n FROM t";
    let h = Hostile::build(5, sql, Some(&dp), Some(DisclosurePolicy::default())).await;
    let LogicalPlan::Aggregate(agg) = h.encoders[0].plan().clone() else {
        panic!()
    };
    let aggr: Vec<Expr> = agg
        .aggr_expr
        .iter()
        .map(|e| match e.clone() {
            Expr::AggregateFunction(mut f) => {
                f.params.distinct = true;
                Expr::AggregateFunction(f)
            }
            Expr::Alias(mut a) => {
                if let Expr::AggregateFunction(f) = a.expr.as_mut() {
                    f.params.distinct = true;
                }
                Expr::Alias(a)
            }
            other => other,
        })
        .collect();
    let plan = LogicalPlan::Aggregate(
        Aggregate::try_new(Arc::clone(&agg.input), agg.group_expr.clone(), aggr).unwrap(),
    );
    let err = fedsql::protocol::encoder::Encoder::split(&h.ctx.session().state(), &plan)
        .await
        .expect_err("a DISTINCT aggregate")
        .to_string();
    assert!(
        err.contains("a DISTINCT aggregate keeps every distinct value in its state"),
        "{err}"
    );
    let schema = h.encoders[0].state_schema().clone();
    let err = fedsql::protocol::encoder::Encoder::try_new(plan, schema)
        .expect_err("a DISTINCT aggregate")
        .to_string();
    assert!(
        err.contains("a DISTINCT aggregate keeps every distinct value in its state"),
        "{err}"
    );
}
