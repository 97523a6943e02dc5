//! One FedSGD round's answers: the clients chosen for it, their sums
//! checked (the first round's, and non-finite values skipped with a
//! warning) and combined into the server's step.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Float64Type;
use fedsql_udfs::sgd_step::SgdSums;
use ndarray::{Array1, Array2};
use rand::rngs::StdRng;

use crate::coordinator::rounds::ClientAnswer;
use crate::error::{FedError, Result};

use super::spec::{FedSgdSpec, Weighting};

/// The clients of one round: all, or a seeded sample.
pub(super) fn choose_clients(
    names: &[&str],
    per_round: Option<usize>,
    rng: &mut StdRng,
) -> Result<Vec<usize>> {
    match per_round {
        None => Ok((0..names.len()).collect()),
        Some(k) if k > names.len() => Err(FedError::InvalidArgument(format!(
            "clients_per_round={k}, but the table has {} clients",
            names.len()
        ))),
        Some(k) => {
            let mut chosen = rand::seq::index::sample(rng, names.len(), k).into_vec();
            chosen.sort_unstable();
            Ok(chosen)
        }
    }
}

/// The aggregated objective of one round.
pub(super) struct Aggregated {
    pub(super) loss: f64,
    pub(super) gradient: Array1<f64>,
    pub(super) curvature: Option<Array2<f64>>,
    pub(super) clients_used: usize,
}

/// Averages the clients' sums as the weighting says; a client whose sums
/// are not finite gets weight 0 (and a warning), as TensorFlow Federated
/// does.
pub(super) fn aggregate(
    answers: &[(String, SgdSums)],
    weighting: Weighting,
    round: usize,
    skipped: &mut Vec<(String, usize)>,
) -> Option<Aggregated> {
    let k = answers.first()?.1.gradient.len();
    let mut loss = 0.0;
    let mut gradient = Array1::<f64>::zeros(k);
    let mut curvature = answers
        .first()?
        .1
        .curvature
        .as_ref()
        .map(|_| Array2::<f64>::zeros((k, k)));
    let mut weight_total = 0.0;
    let mut clients_used = 0;
    for (client, sums) in answers {
        if sums.n == 0.0 {
            continue;
        }
        let finite = sums.loss.is_finite()
            && sums.gradient.iter().all(|g| g.is_finite())
            && sums
                .curvature
                .as_ref()
                .is_none_or(|c| c.iter().all(|v| v.is_finite()));
        if !finite {
            skipped.push((client.clone(), round));
            continue;
        }
        // Sums over the client's examples; a uniform weight divides them
        // by the client's count first.
        let scale = match weighting {
            Weighting::NumExamples => 1.0,
            Weighting::Uniform => 1.0 / sums.n,
        };
        loss += scale * sums.loss;
        gradient.scaled_add(scale, &sums.gradient);
        if let (Some(total), Some(c)) = (curvature.as_mut(), sums.curvature.as_ref()) {
            total.scaled_add(scale, c);
        }
        weight_total += match weighting {
            Weighting::NumExamples => sums.n,
            Weighting::Uniform => 1.0,
        };
        clients_used += 1;
    }
    if clients_used == 0 {
        return None;
    }
    Some(Aggregated {
        loss: loss / weight_total,
        gradient: gradient / weight_total,
        curvature: curvature.map(|c| c / weight_total),
        clients_used,
    })
}

/// The sums each client returned.
pub(super) fn client_sums(answers: &[ClientAnswer], k: usize) -> Result<Vec<(String, SgdSums)>> {
    answers
        .iter()
        .map(|a| {
            let batch = a.batches.first().ok_or_else(|| {
                FedError::Internal(format!("client `{}` answered nothing", a.client))
            })?;
            let list = batch.column(0).as_list::<i32>().value(0);
            let values = list.as_primitive::<Float64Type>().values();
            Ok((a.client.clone(), SgdSums::from_slice(values, k)))
        })
        .collect()
}

/// The first round's checks: responses in range, and rows to fit on.
pub(super) fn check_first_round(spec: &FedSgdSpec, answers: &[(String, SgdSums)]) -> Result<()> {
    let invalid: f64 = answers.iter().map(|(_, s)| s.invalid).sum();
    if invalid > 0.0 {
        let rule = spec
            .model
            .check_response(-1.0)
            .or(spec.model.check_response(2.0))
            .or(spec.model.check_response(f64::NAN))
            .unwrap_or("");
        return Err(FedError::InvalidArgument(format!(
            "{invalid} rows have a response outside the range of the {} model: {rule}",
            spec.model.name()
        )));
    }
    if answers.iter().all(|(_, s)| s.n == 0.0) && spec.clients_per_round.is_none() {
        return Err(FedError::InvalidArgument(format!(
            "no rows to fit: '{}' has no rows with every model column present",
            spec.source.given
        )));
    }
    Ok(())
}

/// One warning per client that was given weight 0 in some rounds.
pub(super) fn nonfinite_warnings(skipped: &[(String, usize)]) -> Vec<String> {
    let mut clients: Vec<&str> = skipped.iter().map(|(c, _)| c.as_str()).collect();
    clients.dedup();
    clients.sort_unstable();
    clients.dedup();
    clients
        .into_iter()
        .map(|client| {
            let rounds: Vec<usize> = skipped
                .iter()
                .filter(|(c, _)| c == client)
                .map(|(_, r)| *r)
                .collect();
            format!(
                "client `{client}` returned a non-finite gradient or loss in {} round(s) (first: round {}); it was given weight 0 there",
                rounds.len(),
                rounds[0]
            )
        })
        .collect()
}
