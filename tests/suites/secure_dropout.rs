//! Secure aggregation with dropouts, and a coordinator that tries to break
//! it: sites that fail at each of the five steps (left out before their
//! masked state, recovered after), fewer than the threshold, and requests
//! a dishonest coordinator could make — a living site claimed dropped,
//! both shares of one site, replayed and misaddressed messages.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use fedsql::FedContext;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::encoder::Encoder;
use fedsql::protocol::encoder::StateBatch;
use fedsql::protocol::secure::consistency::ConfirmRequest;
use fedsql::protocol::secure::{
    MaskRequest, Revealed, RevealedKind, SecureSession, SecureSetup, ShareEnvelope, ShareRequest,
    UnmaskRequest, masks, shamir,
};
use fedsql::protocol::site::{Analyst, Site, SiteRequest};
use fedsql::site::local::LocalClient;
use fedsql::{FedError, Result};

/// The step at which a site fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    Never,
    Setup,
    /// In a sparse round: at the graph nonce's reveal.
    Reveal,
    Share,
    Mask,
    Confirm,
    Unmask,
}

/// Every step a site can fail at.
const EVERY_STEP: [Fail; 5] = [
    Fail::Setup,
    Fail::Share,
    Fail::Mask,
    Fail::Confirm,
    Fail::Unmask,
];

/// A site that fails (as a lost connection does) at one step.
#[derive(Debug)]
struct Flaky {
    inner: Arc<LocalClient>,
    fail: Fail,
}

impl Flaky {
    fn lost(&self, at: Fail) -> Result<()> {
        if self.fail == at {
            return Err(FedError::Client {
                client: self.name().to_string(),
                location: "memory".into(),
                message: "connection reset".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Site for Flaky {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn format(&self) -> String {
        self.inner.format()
    }
    async fn encode(&self, request: &SiteRequest<'_>) -> Result<StateBatch> {
        self.inner.encode(request).await
    }
    async fn explain(&self, request: &SiteRequest<'_>) -> Result<String> {
        self.inner.explain(request).await
    }
    async fn secure_setup(
        &self,
        request: &SiteRequest<'_>,
        session: &SecureSession,
    ) -> Result<SecureSetup> {
        self.lost(Fail::Setup)?;
        self.inner.secure_setup(request, session).await
    }
    async fn secure_reveal(
        &self,
        request: &SiteRequest<'_>,
        reveal: &ShareRequest,
    ) -> Result<[u8; 32]> {
        self.lost(Fail::Reveal)?;
        self.inner.secure_reveal(request, reveal).await
    }
    async fn secure_share(
        &self,
        request: &SiteRequest<'_>,
        share: &ShareRequest,
    ) -> Result<Vec<ShareEnvelope>> {
        self.lost(Fail::Share)?;
        self.inner.secure_share(request, share).await
    }
    async fn encode_masked(
        &self,
        request: &SiteRequest<'_>,
        mask: &MaskRequest,
    ) -> Result<StateBatch> {
        // A site lost after masking: it masked, but its answer is lost.
        let state = self.inner.encode_masked(request, mask).await;
        self.lost(Fail::Mask)?;
        state
    }
    async fn secure_confirm(
        &self,
        request: &SiteRequest<'_>,
        confirm: &fedsql::protocol::secure::consistency::ConfirmRequest,
    ) -> Result<fedsql::protocol::secure::consistency::ListSignature> {
        self.lost(Fail::Confirm)?;
        self.inner.secure_confirm(request, confirm).await
    }
    async fn secure_unmask(
        &self,
        request: &SiteRequest<'_>,
        unmask: &UnmaskRequest,
    ) -> Result<Vec<Revealed>> {
        self.lost(Fail::Unmask)?;
        self.inner.secure_unmask(request, unmask).await
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("x", DataType::Int64, false),
    ]))
}

/// Site `c`'s rows: a few values in two groups, different per site.
fn site_rows(c: usize) -> RecordBatch {
    let n = c % 4 + 1;
    let g: Vec<i64> = (0..n).map(|i| (i % 2) as i64).collect();
    let x: Vec<i64> = (0..n).map(|i| ((c * 37 + i * 11) % 1000) as i64).collect();
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(g)), Arc::new(Int64Array::from(x))],
    )
    .unwrap()
}

fn local(c: usize, engine: &Arc<fedsql::site::engine::SiteEngine>) -> Arc<LocalClient> {
    local_with(c, site_rows(c), engine)
}

fn local_with(
    c: usize,
    rows: RecordBatch,
    engine: &Arc<fedsql::site::engine::SiteEngine>,
) -> Arc<LocalClient> {
    let name = format!("site{c}");
    Arc::new(
        LocalClient::from_batches(
            &name,
            &format!("memory:{name}"),
            schema(),
            vec![rows],
            Arc::clone(engine),
        )
        .unwrap(),
    )
}

/// A federation of `n` sites, each failing as `fail` says.
fn federation(n: usize, fail: impl Fn(usize) -> Fail) -> FedContext {
    federation_of((0..n).map(site_rows).collect(), fail)
}

/// A federation of sites with these rows, each failing as `fail` says.
fn federation_of(rows: Vec<RecordBatch>, fail: impl Fn(usize) -> Fail) -> FedContext {
    let engine = Arc::new(fedsql::site::engine::SiteEngine::new());
    let runners: Vec<Arc<dyn Site>> = rows
        .into_iter()
        .enumerate()
        .map(|(c, rows)| {
            Arc::new(Flaky {
                inner: local_with(c, rows, &engine),
                fail: fail(c),
            }) as Arc<dyn Site>
        })
        .collect();
    let fed = FedContext::new();
    fed.session()
        .register_table(
            "t",
            FederatedTable::new("t", schema(), runners).into_provider(),
        )
        .unwrap();
    fed
}

/// The plain sums of `x` per group and in all over the `sites`.
fn plain_sums(sites: impl Iterator<Item = usize>) -> ([i64; 2], i64) {
    let mut groups = [0i64; 2];
    for c in sites {
        let batch = site_rows(c);
        let g = batch.column(0).as_primitive::<Int64Type>();
        let x = batch.column(1).as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            groups[g.value(i) as usize] += x.value(i);
        }
    }
    (groups, groups[0] + groups[1])
}

async fn secure_sums(fed: &FedContext) -> Result<[i64; 2]> {
    let batches = fed
        .sql("SELECT g, secure_sum(x, 0, 1000) AS s FROM t GROUP BY g ORDER BY g")
        .await?
        .collect()
        .await?;
    let mut sums = [0i64; 2];
    for batch in &batches {
        let g = batch.column(0).as_primitive::<Int64Type>();
        let s = batch.column(1).as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            sums[g.value(i) as usize] = s.value(i);
        }
    }
    Ok(sums)
}

/// Dropouts at every step, with 5 and 25 sites, one and two of them: the
/// total is exactly the plain sum over the sites that took part (a site
/// lost at the unmasking took part; one lost at the signing of the
/// survivor list did not: the round ran again without it), and the
/// notice names them all.
#[tokio::test]
async fn dropouts_at_every_step_give_the_sum_over_the_sites_that_took_part() {
    for n in [5usize, 25] {
        for step in EVERY_STEP {
            for dropping in [vec![n - 1], vec![1, n - 2]] {
                let fed = federation(n, |c| {
                    if dropping.contains(&c) {
                        step
                    } else {
                        Fail::Never
                    }
                });
                let got = secure_sums(&fed)
                    .await
                    .unwrap_or_else(|e| panic!("{n} sites, {step:?} {dropping:?}: {e}"));
                let took_part: Vec<usize> = (0..n)
                    .filter(|c| matches!(step, Fail::Unmask) || !dropping.contains(c))
                    .collect();
                // A group fewer than t of the sites that took part have is
                // withheld (its sum would be theirs alone).
                let (mut want, _) = plain_sums(took_part.iter().copied());
                let t = n / 2 + 1;
                let mut withheld = 0;
                for (g, sum) in want.iter_mut().enumerate() {
                    let holders = took_part
                        .iter()
                        .filter(|&&c| site_rows(c).num_rows() > g)
                        .count();
                    if holders < t {
                        *sum = 0;
                        withheld += 1;
                    }
                }
                assert_eq!(got, want, "{n} sites, {step:?} {dropping:?}");
                let notices = fed.take_notices();
                let line = notices
                    .iter()
                    .find(|l| l.starts_with("secure aggregation:"))
                    .unwrap_or_else(|| panic!("no notice: {notices:?}"));
                assert!(
                    line.contains(&format!("{} of {n} clients took part", took_part.len())),
                    "{line}"
                );
                for c in &dropping {
                    assert!(line.contains(&format!("'site{c}'")), "{line}");
                }
                if step == Fail::Confirm {
                    assert!(
                        line.contains(
                            "did not sign the survivor list; the round was run again without it"
                        ),
                        "{line}"
                    );
                }
                if step == Fail::Mask {
                    assert!(
                        line.contains("dropped out after masking; its masks were removed"),
                        "{line}"
                    );
                }
                if withheld > 0 {
                    assert!(
                        line.contains(&format!(
                            "{withheld} group(s) held by fewer than the threshold of {t} sites are not shown"
                        )),
                        "{line}"
                    );
                }
            }
        }
    }
}

/// A group that only a site lost after masking has is not in the answer
/// (as on the data of the sites that took part).
#[tokio::test]
async fn a_group_only_a_dropped_site_had_is_not_in_the_answer() {
    let mut rows: Vec<RecordBatch> = (0..5).map(site_rows).collect();
    rows[4] = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![0, 7])),
            Arc::new(Int64Array::from(vec![5, 9])),
        ],
    )
    .unwrap();
    let fed = federation_of(rows, |c| if c == 4 { Fail::Mask } else { Fail::Never });
    let batches = fed
        .sql("SELECT g, secure_sum(x, 0, 1000) AS s FROM t GROUP BY g ORDER BY g")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let groups: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(groups, vec![0, 1]);
}

/// Fewer sites than the threshold at any step: an error naming the sites
/// that dropped and the threshold, never a number.
#[tokio::test]
async fn below_the_threshold_the_query_fails_naming_the_dropped_sites() {
    for step in EVERY_STEP {
        // 5 sites, threshold 3: three dropping leaves two.
        let fed = federation(5, |c| if c >= 2 { step } else { Fail::Never });
        let err = secure_sums(&fed).await.unwrap_err().to_string();
        assert!(
            err.contains("fewer than the threshold 3"),
            "{step:?}: {err}"
        );
        for c in 2..5 {
            assert!(err.contains(&format!("'site{c}'")), "{step:?}: {err}");
        }
    }
    // A threshold set per query: 2 of 5 dropping with t = 4 fails.
    let fed = federation(5, |c| if c >= 3 { Fail::Mask } else { Fail::Never });
    fed.sql("SET fedsql.secure_threshold = 4").await.unwrap();
    let err = secure_sums(&fed).await.unwrap_err().to_string();
    assert!(err.contains("fewer than the threshold 4"), "{err}");
    assert!(err.contains("'site3'") && err.contains("'site4'"), "{err}");
    // A threshold below a strict majority is refused by the sites.
    fed.sql("SET fedsql.secure_threshold = 2").await.unwrap();
    let err = secure_sums(&fed).await.unwrap_err().to_string();
    assert!(err.contains("strict majority"), "{err}");
}

/// With every site present, the threshold's only effect is none: the sum
/// is exact, and EXPLAIN ANALYZE FEDERATED lists who took part.
#[tokio::test]
async fn explain_analyze_lists_who_took_part() {
    let fed = federation(5, |c| if c == 4 { Fail::Mask } else { Fail::Never });
    let batches = fed
        .sql("EXPLAIN ANALYZE FEDERATED SELECT secure_sum(x, 0, 1000) AS s FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut text = arrow_text(&batches);
    text.extend(fed.take_notices());
    let all = text.join("\n");
    assert!(
        all.contains("4 of 5 clients took part (threshold 3)"),
        "{all}"
    );
    assert!(
        all.contains("'site4' dropped out after masking; its masks were removed"),
        "{all}"
    );
}

fn arrow_text(batches: &[RecordBatch]) -> Vec<String> {
    datafusion::arrow::util::pretty::pretty_format_batches(batches)
        .map(|t| vec![t.to_string()])
        .unwrap_or_default()
}

/// A site that keeps the encoder it was asked to run (so a test can
/// drive a session by hand, as a dishonest coordinator would).
#[derive(Debug)]
struct Capture {
    inner: Arc<LocalClient>,
    encoder: std::sync::Mutex<Option<Encoder>>,
}

#[async_trait]
impl Site for Capture {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn format(&self) -> String {
        self.inner.format()
    }
    async fn encode(&self, request: &SiteRequest<'_>) -> Result<StateBatch> {
        self.inner.encode(request).await
    }
    async fn explain(&self, request: &SiteRequest<'_>) -> Result<String> {
        self.inner.explain(request).await
    }
    async fn secure_setup(
        &self,
        request: &SiteRequest<'_>,
        _session: &SecureSession,
    ) -> Result<SecureSetup> {
        *self.encoder.lock().unwrap() = Some(request.encoder.clone());
        Err(FedError::Client {
            client: self.name().to_string(),
            location: "memory".into(),
            message: "captured".into(),
        })
    }
}

/// The sites of a hand-run session and the steps' messages, built here.
struct Driven {
    sites: Vec<Arc<LocalClient>>,
    encoders: Vec<Encoder>,
    analyst: Analyst,
    session: SecureSession,
}

impl Driven {
    async fn new(n: usize) -> Self {
        let engine = Arc::new(fedsql::site::engine::SiteEngine::new());
        let sites: Vec<Arc<LocalClient>> = (0..n).map(|c| local(c, &engine)).collect();
        let captures: Vec<Arc<Capture>> = sites
            .iter()
            .map(|s| {
                Arc::new(Capture {
                    inner: Arc::clone(s),
                    encoder: std::sync::Mutex::new(None),
                })
            })
            .collect();
        let fed = FedContext::new();
        fed.session()
            .register_table(
                "t",
                FederatedTable::new(
                    "t",
                    schema(),
                    captures
                        .iter()
                        .map(|c| Arc::clone(c) as Arc<dyn Site>)
                        .collect(),
                )
                .into_provider(),
            )
            .unwrap();
        // The round fails (every site "drops out"), having shown each its encoder.
        assert!(secure_sums(&fed).await.is_err());
        let encoders = captures
            .iter()
            .map(|c| c.encoder.lock().unwrap().clone().expect("captured"))
            .collect();
        Self {
            sites,
            encoders,
            analyst: Analyst::session(),
            session: SecureSession::fresh((0..n).map(|c| format!("site{c}")).collect()),
        }
    }

    fn request(&self, c: usize) -> SiteRequest<'_> {
        SiteRequest::new(&self.encoders[c], &self.analyst)
    }

    /// Steps 1 and 2 with every site: the keys and every site's envelopes.
    async fn setup_and_share(&self) -> (ShareRequest, Vec<Vec<ShareEnvelope>>, RecordBatch) {
        let mut keys = Vec::new();
        let mut group_keys = Vec::new();
        for c in 0..self.sites.len() {
            let setup = self.sites[c]
                .secure_setup(&self.request(c), &self.session)
                .await
                .unwrap();
            keys.push(Some(setup.keys));
            group_keys.push(setup.group_keys);
        }
        let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
        let share = ShareRequest {
            session: self.session.clone(),
            keys,
            nonces: Vec::new(),
        };
        let mut envelopes = Vec::new();
        for c in 0..self.sites.len() {
            envelopes.push(
                self.sites[c]
                    .secure_share(&self.request(c), &share)
                    .await
                    .unwrap(),
            );
        }
        (share, envelopes, groups)
    }

    fn mask_request(
        &self,
        to: usize,
        envelopes: &[Vec<ShareEnvelope>],
        groups: &RecordBatch,
    ) -> MaskRequest {
        MaskRequest {
            session: self.session.clone(),
            envelopes: envelopes
                .iter()
                .flatten()
                .filter(|e| e.to as usize == to)
                .cloned()
                .collect(),
            groups: groups.clone(),
        }
    }

    async fn masked(
        &self,
        c: usize,
        envelopes: &[Vec<ShareEnvelope>],
        groups: &RecordBatch,
    ) -> u64 {
        let state = self.sites[c]
            .encode_masked(&self.request(c), &self.mask_request(c, envelopes, groups))
            .await
            .unwrap();
        // The first word of the secure state (the quantized sum).
        let batch = state.batch();
        let column = (0..batch.num_columns())
            .find(|&i| batch.column(i).data_type() == &DataType::UInt64)
            .expect("a secure state column");
        batch.column(column).as_primitive::<UInt64Type>().value(0)
    }

    fn confirm(&self, survivors: &[u32]) -> ConfirmRequest {
        ConfirmRequest {
            session: self.session.clone(),
            survivors: survivors.to_vec(),
        }
    }

    /// Step 4 with each of `signers`: the unmasking request for `survivors`
    /// with their signatures.
    async fn signed(&self, survivors: &[u32], signers: &[usize]) -> UnmaskRequest {
        let mut signatures = Vec::new();
        for &c in signers {
            signatures.push(
                self.sites[c]
                    .secure_confirm(&self.request(c), &self.confirm(survivors))
                    .await
                    .unwrap(),
            );
        }
        UnmaskRequest {
            session: self.session.clone(),
            survivors: survivors.to_vec(),
            signatures,
        }
    }
}

/// A coordinator that claims a living site dropped out, to unmask its
/// state: the site itself refuses to answer; the others reveal its mask
/// key's shares, which remove its pairwise masks — but its self mask stays,
/// so its state is still masked; and asking them again (for its self seed)
/// is refused, as is any second unmasking.
#[tokio::test]
async fn a_living_site_claimed_dropped_stays_masked() {
    let d = Driven::new(5).await;
    let (share, envelopes, groups) = d.setup_and_share().await;
    let mut masked = Vec::new();
    for c in 0..5 {
        masked.push(d.masked(c, &envelopes, &groups).await);
    }
    // Site 4 sent its masked state; the coordinator says it dropped.
    let err = d.sites[4]
        .secure_confirm(&d.request(4), &d.confirm(&[0, 1, 2, 3]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("refused") || err.contains("listed as dropped"),
        "{err}"
    );
    let claim = d.signed(&[0, 1, 2, 3], &[0, 1, 2, 3]).await;
    let mut key_shares = Vec::new();
    for c in 0..3 {
        let revealed = d.sites[c]
            .secure_unmask(&d.request(c), &claim)
            .await
            .unwrap();
        // Of site 4, only the mask key's share; never its self seed's.
        let of4: Vec<&Revealed> = revealed.iter().filter(|r| r.of == 4).collect();
        assert_eq!(of4.len(), 1);
        assert_eq!(of4[0].kind, RevealedKind::MaskKey);
        key_shares.push(of4[0].share);
        // Asking again, now for site 4's self seed: the session is over.
        let mut again = claim.clone();
        again.survivors = vec![0, 1, 2, 3, 4];
        let again = d.sites[c]
            .secure_unmask(&d.request(c), &again)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            again.contains("no secure session") || again.contains("refused"),
            "{again}"
        );
    }
    // The coordinator rebuilds site 4's mask key and removes its pairwise
    // masks: what is left is its state plus its self mask.
    let secret = shamir::combine(&key_shares).expect("three shares of t = 3");
    let secret = x25519_dalek::StaticSecret::from(secret);
    let mut unmasked = vec![masked[4]];
    for v in 0..4 {
        let peer = share.keys[v].unwrap().mask_key;
        let seed = masks::pairwise_seed(&secret, &peer, &d.session.id).unwrap();
        masks::apply_pairwise(&mut unmasked, &seed, !masks::adds(4, v));
    }
    let (_, site4) = plain_sums(std::iter::once(4));
    assert_ne!(unmasked[0], site4 as u64, "site 4's state was unmasked");
}

/// Replayed, reordered and misaddressed messages are refused.
#[tokio::test]
async fn replayed_reordered_and_misaddressed_messages_are_refused() {
    let d = Driven::new(3).await;
    // A step before its time: shares before the setup; masking before sharing.
    let early = ShareRequest {
        session: d.session.clone(),
        keys: vec![None, None, None],
        nonces: Vec::new(),
    };
    assert!(
        d.sites[0]
            .secure_share(&d.request(0), &early)
            .await
            .is_err()
    );
    let (share, envelopes, groups) = d.setup_and_share().await;
    // The setup and the shares again (a replay).
    assert!(
        d.sites[0]
            .secure_setup(&d.request(0), &d.session)
            .await
            .is_err()
    );
    // Site 1's envelopes given to site 2 (misaddressed): refused.
    let mut wrong = d.mask_request(2, &envelopes, &groups);
    wrong.envelopes = envelopes[0].iter().filter(|e| e.to == 1).cloned().collect();
    let err = d.sites[2]
        .encode_masked(&d.request(2), &wrong)
        .await
        .unwrap_err()
        .to_string();
    assert!(!err.is_empty());
    // That refusal ended site 2's session: a correct request is refused too.
    assert!(
        d.sites[2]
            .encode_masked(&d.request(2), &d.mask_request(2, &envelopes, &groups))
            .await
            .is_err()
    );
    // An envelope with its sender changed (reordered): refused.
    let mut swapped = d.mask_request(1, &envelopes, &groups);
    for e in &mut swapped.envelopes {
        e.from = if e.from == 0 { 2 } else { 0 };
    }
    assert!(
        d.sites[1]
            .encode_masked(&d.request(1), &swapped)
            .await
            .is_err()
    );
    // An envelope twice (a replay within the request): refused.
    let mut twice = d.mask_request(0, &envelopes, &groups);
    twice.envelopes.push(twice.envelopes[0].clone());
    assert!(
        d.sites[0]
            .encode_masked(&d.request(0), &twice)
            .await
            .is_err()
    );
    // Another session's envelopes: refused.
    let other = Driven::new(3).await;
    let (_, other_envelopes, _) = other.setup_and_share().await;
    let mut foreign = d.mask_request(0, &envelopes, &groups);
    foreign.envelopes = other.mask_request(0, &other_envelopes, &groups).envelopes;
    let _ = share;
    // Site 0's session is over after the refusal above; a fresh one shows
    // the foreign envelopes refused on their own.
    let e = Driven::new(3).await;
    let (_, e_envelopes, e_groups) = e.setup_and_share().await;
    let mut foreign_e = e.mask_request(0, &e_envelopes, &e_groups);
    foreign_e.envelopes = foreign.envelopes;
    assert!(
        e.sites[0]
            .encode_masked(&e.request(0), &foreign_e)
            .await
            .is_err()
    );
}

/// Nothing is signed or revealed below the threshold, a site answers one
/// confirmation and one unmasking only, and it reveals only for a list
/// the threshold signed.
#[tokio::test]
async fn unmasking_below_the_threshold_or_twice_reveals_nothing() {
    let d = Driven::new(5).await;
    let (_, envelopes, groups) = d.setup_and_share().await;
    for c in 0..5 {
        d.masked(c, &envelopes, &groups).await;
    }
    // Two survivors, threshold 3: refused, and the session is over.
    let err = d.sites[0]
        .secure_confirm(&d.request(0), &d.confirm(&[0, 1]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("fewer than the threshold 3"), "{err}");
    assert!(
        d.sites[0]
            .secure_confirm(&d.request(0), &d.confirm(&[0, 1, 2, 3, 4]))
            .await
            .is_err()
    );
    // A survivor listed twice: refused.
    let err = d.sites[1]
        .secure_confirm(&d.request(1), &d.confirm(&[0, 1, 1, 2]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("increasing order"), "{err}");
    // Sites 2, 3 and 4 sign [2, 3, 4]; two signatures are not enough.
    let mut request = d.signed(&[2, 3, 4], &[2, 3, 4]).await;
    let all = request.signatures.clone();
    request.signatures.truncate(2);
    let err = d.sites[4]
        .secure_unmask(&d.request(4), &request)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("2 survivors signed"), "{err}");
    // All three: one share per site site 2 masked with, of the right kind.
    request.signatures = all;
    let revealed = d.sites[2]
        .secure_unmask(&d.request(2), &request)
        .await
        .unwrap();
    assert_eq!(revealed.len(), 5);
    for r in &revealed {
        let want = if r.of < 2 {
            RevealedKind::MaskKey
        } else {
            RevealedKind::SelfSeed
        };
        assert_eq!(r.kind, want, "{r:?}");
    }
    // Once only.
    assert!(
        d.sites[2]
            .secure_unmask(&d.request(2), &request)
            .await
            .is_err()
    );
}

/// A `fedsql worker` child process serving `t` from one CSV file; killed
/// (and continued first, if stopped) when dropped.
struct FrozenWorker {
    child: std::process::Child,
    addr: String,
}

impl FrozenWorker {
    fn spawn(file: &std::path::Path, token_file: &std::path::Path) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fedsql"))
            .args(["worker", "--audit-log", "none", "--policy", "none"])
            .args(["--listen", "127.0.0.1:0", "--table"])
            .arg(format!("t={}", file.display()))
            .arg("--token-file")
            .arg(token_file)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix("fedsql worker listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        Self { child, addr }
    }

    fn signal(&self, signal: &str) {
        std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
    }
}

impl Drop for FrozenWorker {
    fn drop(&mut self) {
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The acceptance test: five workers, the table's timeout at 2 s. One
/// worker frozen (SIGSTOP) at some moment of a `secure_sum` gives the sum
/// over all five, or over the four that took part with a notice naming the
/// fifth, within the timeout and a margin; two frozen with threshold 4
/// give an error naming them. Never another number.
#[tokio::test]
async fn frozen_workers_are_left_out_or_recovered_within_the_timeout() {
    let dir = tempfile::TempDir::new().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "frozen-worker-token\n").unwrap();
    let values: Vec<Vec<i64>> = (0..5)
        .map(|w| (0..(w + 2)).map(|i| (w * 100 + i * 7) as i64).collect())
        .collect();
    let workers: Vec<FrozenWorker> = (0..5)
        .map(|w| {
            let file = dir.path().join(format!("w{w}.csv"));
            let body: String = values[w].iter().map(|v| format!("{v}\n")).collect();
            std::fs::write(&file, format!("x\n{body}")).unwrap();
            FrozenWorker::spawn(&file, &token)
        })
        .collect();
    let create = |threshold: &str| {
        let clients: Vec<String> = workers
            .iter()
            .enumerate()
            .map(|(w, k)| format!("'w{w}' = 'grpc://{}'", k.addr))
            .collect();
        format!(
            "CREATE OR REPLACE FEDERATED TABLE t CLIENTS ({}) OPTIONS ('token_file' '{}', 'timeout' '2s'{threshold})",
            clients.join(", "),
            token.display()
        )
    };
    let total = |skip: &[usize]| -> i64 {
        (0..5)
            .filter(|w| !skip.contains(w))
            .flat_map(|w| values[w].iter())
            .sum()
    };
    let fed = FedContext::new();
    fed.sql(&create("")).await.unwrap();
    let sql = "SELECT secure_sum(x, 0, 1000) AS s FROM t";
    let sum = |batches: &[RecordBatch]| batches[0].column(0).as_primitive::<Int64Type>().value(0);
    // All present.
    let got = fed.sql(sql).await.unwrap().collect().await.unwrap();
    assert_eq!(sum(&got), total(&[]));
    fed.take_notices();
    // Worker 4 frozen after a delay: before, during or after its steps.
    for delay_ms in [0u64, 5, 20, 60, 150] {
        let started = std::time::Instant::now();
        let query = fed.sql(sql);
        let freeze = async {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            workers[4].signal("-STOP");
        };
        let (answer, ()) = tokio::join!(async { query.await?.collect().await }, freeze);
        let elapsed = started.elapsed();
        workers[4].signal("-CONT");
        let got = sum(&answer.unwrap_or_else(|e| panic!("delay {delay_ms} ms: {e}")));
        let notices = fed.take_notices();
        if got == total(&[]) {
            assert!(
                notices.iter().all(|l| !l.contains("'w4'")
                    || l.contains("did not answer the unmasking")
                    || l.contains("did not sign the survivor list; its state counts")),
                "{notices:?}"
            );
        } else {
            assert_eq!(got, total(&[4]), "delay {delay_ms} ms: a different number");
            assert!(
                notices
                    .iter()
                    .any(|l| l.contains("4 of 5 clients took part") && l.contains("'w4'")),
                "{notices:?}"
            );
        }
        assert!(
            elapsed < std::time::Duration::from_secs(2 + 8),
            "delay {delay_ms} ms: {elapsed:?}"
        );
        // Let the thawed worker finish what it had.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Two frozen, threshold 4: an error naming both.
    fed.sql(&create(", 'secure_threshold' '4'")).await.unwrap();
    workers[3].signal("-STOP");
    workers[4].signal("-STOP");
    let err = fed
        .sql(sql)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    workers[3].signal("-CONT");
    workers[4].signal("-CONT");
    assert!(err.contains("fewer than the threshold 4"), "{err}");
    assert!(err.contains("'w3'") && err.contains("'w4'"), "{err}");
}

/// A sparse round (101 sites: the SecAgg+ neighbour graph) with one site
/// in ten lost after masking: the exact sum over the sites that took part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_round_gives_the_exact_sum_over_the_sites_that_took_part() {
    let n = 101;
    assert!(fedsql::protocol::secure::graph::is_sparse(
        n,
        fedsql::protocol::secure::default_threshold(n)
    ));
    let fed = federation(n, |c| if c % 10 == 9 { Fail::Mask } else { Fail::Never });
    let got = secure_sums(&fed).await.unwrap();
    let (want, _) = plain_sums((0..n).filter(|c| c % 10 != 9));
    assert_eq!(got, want);
}

/// A sparse round in which two sites fail to reveal their graph nonces
/// (and one in ten is lost after masking): the session ends at the
/// reveal (the graph needs every participant's nonce), the round runs
/// again without the two, and the sum is exact over the sites that took
/// part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_round_runs_again_without_the_sites_that_did_not_reveal_their_nonce() {
    let n = 101;
    let fed = federation(n, |c| match c {
        3 | 50 => Fail::Reveal,
        c if c % 10 == 9 => Fail::Mask,
        _ => Fail::Never,
    });
    let got = secure_sums(&fed).await.unwrap();
    let (want, _) = plain_sums((0..n).filter(|&c| c % 10 != 9 && c != 3 && c != 50));
    assert_eq!(got, want);
    let notices = fed.take_notices();
    let line = notices
        .iter()
        .find(|l| l.starts_with("secure aggregation:"))
        .unwrap_or_else(|| panic!("no notice: {notices:?}"));
    assert!(line.contains("89 of 101 clients took part"), "{line}");
    assert!(
        line.contains("'site3' did not reveal its graph nonce; the round was run again without it"),
        "{line}"
    );
    assert!(line.contains("'site50'"), "{line}");
}
