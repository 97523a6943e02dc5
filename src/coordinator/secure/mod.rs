//! The coordinator's half of secure aggregation: it runs the steps with
//! every site, relays keys and sealed share envelopes, leaves out the
//! sites that drop out before masking, recovers those that drop out after,
//! and removes the masks from the sum (see [`crate::protocol::secure`] for
//! the protocol). A site's refusal (its policy, the plan) fails the round;
//! any other failure of a site (an error, a timeout) is a dropout.

mod participation;
mod unmask;

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::physical_plan::aggregates::AggregateExec;
use futures::future::join_all;

use crate::error::{FedError, Result};
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::secure::consistency::ConfirmRequest;
use crate::protocol::secure::threshold::SiteFloor;
use crate::protocol::secure::{
    MaskRequest, ParticipantKeys, SecureLayout, SecureSession, ShareEnvelope, ShareRequest,
    UnmaskRequest, default_threshold, graph, union_groups,
};
use crate::protocol::site::{Analyst, Site, SiteRequest};

pub(crate) use participation::{Participation, Stage};

/// The survivors' masked states of a secure round — the first with the
/// masks of the round removed, so that their plain sum is the total over
/// the sites that took part — each with its site's place and time, and
/// who took part.
pub(crate) struct SecureRound {
    pub states: Vec<(usize, StateBatch, Duration)>,
    pub participation: Participation,
}

/// Whether a site's failure is a refusal (which fails the round, as in a
/// plain round) rather than a dropout.
fn is_refusal(e: &FedError) -> bool {
    matches!(e, FedError::Policy { .. } | FedError::Refused { .. })
}

/// What a client requires of a round's threshold, as far as the
/// coordinator knows (its announced min_secure_clients and federation).
fn floor_of(client: &Arc<dyn Site>) -> SiteFloor {
    SiteFloor {
        min_secure_clients: client.secure_floor(),
        federation: client.secure_federation(),
    }
}

/// The threshold of a round over `clients`: `requested` if set, else the
/// least every site accepts, as far as the coordinator knows (a strict
/// majority; with a site's peers, more than two thirds, more than half of
/// n plus the colluders its federation may hold, and those colluders and
/// two; a site's min_secure_clients). Each site checks it again, and
/// refuses below its own rule.
pub(crate) fn round_threshold(clients: &[Arc<dyn Site>], requested: Option<usize>) -> usize {
    let n = clients.len();
    requested.unwrap_or_else(|| {
        clients
            .iter()
            .map(|c| floor_of(c).least(n))
            .fold(default_threshold(n), usize::max)
    })
}

/// Into how many shares every site of a round at threshold `t` cuts a
/// `secure_dp_…` call's noise: the least of the sites' own counts
/// ([`SiteFloor::noise_shares`]: t, or t − c with peers), as far as the
/// coordinator knows their floors. It goes in the session
/// ([`SecureSession::noise_shares`]); a site whose count is less refuses.
pub(crate) fn noise_shares(clients: &[Arc<dyn Site>], t: usize) -> usize {
    let n = clients.len();
    clients
        .iter()
        .map(|c| floor_of(c).noise_shares(t, n))
        .min()
        .unwrap_or(t)
        .max(1)
}

/// Runs a secure round's steps with every client; `encoders` holds
/// each client's encoder, in the order of `clients`, and every request runs
/// for `analyst`. `partial` is the round's partial aggregate (the layout of
/// its secure columns), `threshold` the round's t.
///
/// Every survivor must sign the survivor list (the sites unmask nothing
/// otherwise): a survivor that does not — it failed between masking and
/// signing — fails the session, and the round runs once more in a fresh
/// session without it (and without any other site lost so far), so the
/// answer covers the sites that took part, as for any dropout. The first
/// session's total is never unmasked. So too in a sparse round for a site
/// that does not reveal its graph nonce: the graph needs every
/// participant's.
pub(crate) async fn collect_masked_states(
    clients: &[Arc<dyn Site>],
    encoders: &[Encoder],
    analyst: &Analyst,
    partial: &AggregateExec,
    threshold: usize,
) -> Result<SecureRound> {
    let layout = SecureLayout::of(partial)?;
    let mut left_out: Vec<(usize, Stage, String)> = Vec::new();
    loop {
        match one_session(clients, encoders, analyst, &layout, threshold, &left_out).await? {
            Session::Done(round) => return Ok(round),
            Session::Rerun(lost) => left_out = lost,
        }
    }
}

/// How one session ended: its round, or the sites to leave out of the next
/// session (those lost so far, and the participants that did not reveal
/// their graph nonce or the survivors that did not sign the survivor list).
enum Session {
    Done(SecureRound),
    Rerun(Vec<(usize, Stage, String)>),
}

/// One session of a secure round's steps; the sites of `left_out`
/// are not asked (they count as dropped out at the step they were lost).
async fn one_session(
    clients: &[Arc<dyn Site>],
    encoders: &[Encoder],
    analyst: &Analyst,
    layout: &SecureLayout,
    threshold: usize,
    left_out: &[(usize, Stage, String)],
) -> Result<Session> {
    let layout = layout.clone();
    let session = SecureSession::fresh(clients.iter().map(|c| c.name().to_string()).collect())
        .with_threshold(threshold)
        .with_noise_shares(noise_shares(clients, threshold));
    let mut part = Participation::new(&session);
    for (i, stage, why) in left_out {
        part.drop_out(*i, *stage, why);
    }
    if !left_out.is_empty() {
        part.check(Stage::Setup)?;
    }
    let n = clients.len();
    let request = |i: usize| SiteRequest::new(&encoders[i], analyst);
    let start = Instant::now();

    // Step 1: keys and group keys.
    let asked = part.alive();
    let answers = join_all(asked.iter().map(|&i| {
        let session = &session;
        async move { clients[i].secure_setup(&request(i), session).await }
    }))
    .await;
    let mut setups: Vec<Option<Result<crate::protocol::secure::SecureSetup>>> =
        (0..n).map(|_| None).collect();
    for (&i, answer) in asked.iter().zip(answers) {
        setups[i] = Some(answer);
    }
    let mut keys: Vec<Option<ParticipantKeys>> = vec![None; n];
    let mut group_keys = vec![None; n];
    for (i, answer) in setups.into_iter().enumerate() {
        let Some(answer) = answer else { continue };
        match answer {
            Ok(setup) => {
                keys[i] = Some(setup.keys);
                group_keys[i] = Some(setup.group_keys);
            }
            Err(e) if is_refusal(&e) => return Err(e),
            Err(e) => part.drop_out(i, Stage::Setup, &e),
        }
    }
    part.check(Stage::Setup)?;

    // A sparse round's coin toss: every participant reveals its graph
    // nonce, now that every commitment is fixed.
    let mut share_request = ShareRequest {
        session: session.clone(),
        keys: keys.clone(),
        nonces: Vec::new(),
    };
    if graph::session_is_sparse(&session) {
        let alive = part.alive();
        let answers = join_all(alive.iter().map(|&i| {
            let share_request = &share_request;
            async move { clients[i].secure_reveal(&request(i), share_request).await }
        }))
        .await;
        let mut nonces = vec![None; n];
        let mut unrevealed = Vec::new();
        for (&i, answer) in alive.iter().zip(answers) {
            let committed = keys[i].expect("answered the setup").graph_commitment;
            match answer {
                Ok(nonce) if graph::nonce_commitment(&session.id, &nonce) == committed => {
                    nonces[i] = Some(nonce);
                }
                Err(e) if is_refusal(&e) => return Err(e),
                Ok(_) => unrevealed.push((
                    i,
                    Stage::Reveal,
                    "it revealed a graph nonce it had not committed to".to_string(),
                )),
                Err(e) => unrevealed.push((i, Stage::Reveal, e.to_string())),
            }
        }
        if !unrevealed.is_empty() {
            let mut lost: Vec<(usize, Stage, String)> = left_out.to_vec();
            lost.extend(unrevealed);
            return Ok(Session::Rerun(lost));
        }
        share_request.nonces = nonces;
    }
    let graph_seed = graph::seed(&session, &keys, &share_request.nonces)
        .map_err(|why| FedError::Internal(format!("the secure round's graph: {why}")))?;

    // Step 2: shares, sealed site to site.
    let alive = part.alive();
    let answers = join_all(alive.iter().map(|&i| {
        let share_request = &share_request;
        async move { clients[i].secure_share(&request(i), share_request).await }
    }))
    .await;
    let mut envelopes: Vec<Vec<ShareEnvelope>> = vec![Vec::new(); n];
    for (&i, answer) in alive.iter().zip(answers) {
        match answer {
            Err(e) if is_refusal(&e) => return Err(e),
            Err(e) => part.drop_out(i, Stage::Shares, &e),
            Ok(sent) => {
                let well_formed = sent.iter().all(|e| {
                    e.from as usize == i
                        && (e.to as usize) < n
                        && e.to as usize != i
                        && keys[e.to as usize].is_some()
                });
                if well_formed {
                    envelopes[i] = sent;
                } else {
                    part.drop_out(
                        i,
                        Stage::Shares,
                        &FedError::Internal("it sent envelopes not from it, or to no site".into()),
                    );
                }
            }
        }
    }
    part.check(Stage::Shares)?;

    // Step 3: masked states.
    let sharing = part.alive();
    let groups = union_groups(
        &sharing
            .iter()
            .map(|&i| group_keys[i].clone().expect("answered the setup"))
            .collect::<Vec<_>>(),
    )?;
    if layout.noised {
        // The sites refuse to fill a group they have no noise share for
        // (see `site::release::secure`): say early which sites differ.
        let short: Vec<String> = sharing
            .iter()
            .filter(|&&i| {
                group_keys[i]
                    .as_ref()
                    .is_some_and(|g| g.num_rows() < groups.num_rows())
            })
            .map(|&i| format!("'{}'", clients[i].name()))
            .collect();
        if !short.is_empty() {
            return Err(FedError::InvalidArgument(format!(
                "a secure_dp_… GROUP BY needs the same groups at every site, but {} declare(s) fewer of the {} groups than the others (their dp_domain differs)\nhint: declare the same dp_domain for the GROUP BY columns at every site",
                short.join(", "),
                groups.num_rows()
            )));
        }
    }
    let mask_requests: Vec<MaskRequest> = sharing
        .iter()
        .map(|&v| MaskRequest {
            session: session.clone(),
            envelopes: sharing
                .iter()
                .flat_map(|&u| envelopes[u].iter().filter(|e| e.to as usize == v))
                .cloned()
                .collect(),
            groups: groups.clone(),
        })
        .collect();
    let setup_time = start.elapsed();
    let answers = join_all(
        sharing
            .iter()
            .zip(&mask_requests)
            .map(|(&i, mask)| async move {
                let start = Instant::now();
                let state = clients[i].encode_masked(&request(i), mask).await;
                (state, start.elapsed())
            }),
    )
    .await;
    let mut masked: Vec<(usize, StateBatch, Duration)> = Vec::new();
    for (&i, (answer, time)) in sharing.iter().zip(answers) {
        match answer {
            Err(e) if is_refusal(&e) => return Err(e),
            Err(e) => part.drop_out(i, Stage::Masking, &e),
            Ok(state) => masked.push((i, state, setup_time + time)),
        }
    }
    part.check(Stage::Masking)?;

    // Step 4: every survivor signs the one survivor list.
    let survivors: Vec<usize> = masked.iter().map(|(i, _, _)| *i).collect();
    let confirm_request = ConfirmRequest {
        session: session.clone(),
        survivors: survivors.iter().map(|&i| i as u32).collect(),
    };
    let answers = join_all(survivors.iter().map(|&i| {
        let confirm_request = &confirm_request;
        async move {
            clients[i]
                .secure_confirm(&request(i), confirm_request)
                .await
        }
    }))
    .await;
    let mut signers = Vec::new();
    let mut signatures = Vec::new();
    let mut unsigned = Vec::new();
    for (&i, answer) in survivors.iter().zip(answers) {
        match answer {
            Ok(signed) if signed.from as usize == i => {
                signers.push(i);
                signatures.push(signed);
            }
            Err(e) if is_refusal(&e) => return Err(e),
            Ok(_) => unsigned.push((
                i,
                Stage::Signing,
                "it signed the survivor list for another place".to_string(),
            )),
            Err(e) => unsigned.push((i, Stage::Signing, e.to_string())),
        }
    }
    // The sites unmask only a list every survivor signed: a session with
    // a survivor that did not sign is over, unmasked by no one; the next
    // one leaves it out (and fails, naming the sites, below the threshold).
    if !unsigned.is_empty() {
        let mut lost: Vec<(usize, Stage, String)> = left_out.to_vec();
        lost.extend(unsigned);
        return Ok(Session::Rerun(lost));
    }

    // Step 5: unmasking, by the survivors that signed.
    let unmask_request = UnmaskRequest {
        session: session.clone(),
        survivors: confirm_request.survivors.clone(),
        signatures,
    };
    let answers = join_all(signers.iter().map(|&i| {
        let unmask_request = &unmask_request;
        async move { clients[i].secure_unmask(&request(i), unmask_request).await }
    }))
    .await;
    let mut revealed = Vec::new();
    for (&i, answer) in signers.iter().zip(answers) {
        match answer {
            Ok(shares) => revealed.push((i, shares)),
            Err(e) => part.miss_unmasking(i, &e),
        }
    }
    let correction = unmask::correction(
        (&session, &graph_seed),
        &keys,
        &sharing,
        &survivors,
        &revealed,
        &layout,
        masked[0].1.batch(),
    )
    .map_err(|e| part.unmask_failed(e))?;
    let (first, state, time) = masked.remove(0);
    let corrected = masks_removed(&encoders[first], &layout, state, &correction)?;
    masked.insert(0, (first, corrected, time));
    // Groups only sites that dropped out had: not in the answer, which
    // covers the sites that took part. Groups fewer than t of them have:
    // not shown either, since their sums are those of fewer than t sites
    // (one site's own, for a group only it has).
    let survivor_keys: Vec<_> = survivors
        .iter()
        .map(|&i| group_keys[i].clone().expect("answered the setup"))
        .collect();
    if let Some((keep, thin)) = covered_groups(&groups, &survivor_keys, session.threshold)? {
        part.withhold_groups(thin);
        for (i, state, _) in &mut masked {
            let batch = datafusion::arrow::compute::filter_record_batch(state.batch(), &keep)?;
            *state = encoders[*i].accept(&[batch])?;
        }
    }
    Ok(Session::Done(SecureRound {
        states: masked,
        participation: part,
    }))
}

/// Which rows of `groups` at least `t` survivors have, and how many rows
/// some but fewer than `t` have; `None` when all rows are kept.
fn covered_groups(
    groups: &datafusion::arrow::record_batch::RecordBatch,
    survivors: &[datafusion::arrow::record_batch::RecordBatch],
    t: usize,
) -> Result<Option<(datafusion::arrow::array::BooleanArray, usize)>> {
    if groups.num_columns() == 0 {
        return Ok(None);
    }
    let converter = crate::protocol::secure::key_converter(groups)?;
    let mut held: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    for keys in survivors {
        let rows = converter.convert_columns(keys.columns())?;
        let mine: std::collections::HashSet<Vec<u8>> =
            rows.iter().map(|r| r.as_ref().to_vec()).collect();
        for row in mine {
            *held.entry(row).or_default() += 1;
        }
    }
    let rows = converter.convert_columns(groups.columns())?;
    let holders: Vec<usize> = rows
        .iter()
        .map(|r| held.get(r.as_ref()).copied().unwrap_or(0))
        .collect();
    let keep: Vec<bool> = holders.iter().map(|&h| h >= t).collect();
    let thin = holders.iter().filter(|&&h| h > 0 && h < t).count();
    Ok((!keep.iter().all(|&k| k)).then(|| (keep.into(), thin)))
}

/// `state` with `correction` added to its secure words.
fn masks_removed(
    encoder: &Encoder,
    layout: &SecureLayout,
    state: StateBatch,
    correction: &[u64],
) -> Result<StateBatch> {
    let batch = crate::protocol::secure::masks::add_mask(state.batch(), layout, correction)?;
    encoder.accept(&[batch])
}
