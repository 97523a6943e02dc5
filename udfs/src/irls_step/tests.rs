use super::*;

#[test]
fn config_round_trips_exactly() {
    let config = IrlsConfig {
        family: Family::Gamma,
        link: Link::Log,
        beta: Some(vec![0.1, -1.0 / 3.0, 1e-300]),
        null_mu: NullMean::Value(2.0 / 3.0),
        xtwx: true,
    };
    assert_eq!(IrlsConfig::decode(&config.encode()).unwrap(), config);
    let last = IrlsConfig {
        xtwx: false,
        ..config
    };
    assert_eq!(IrlsConfig::decode(&last.encode()).unwrap(), last);
    assert!(last.encode().ends_with(";xtwx=no"), "{}", last.encode());
    let first = IrlsConfig::decode("family=binomial").unwrap();
    assert_eq!(
        (first.link, first.beta, first.null_mu, first.xtwx),
        (Link::Logit, None, NullMean::None, true)
    );
}

#[test]
fn null_deviance_of_vectorized_rows_equals_the_general_formula() {
    // Whole blocks take the vectorized pass; the last two rows do not.
    let rows = 4 * 9 + 2;
    let y: Vec<f64> = (0..rows)
        .map(|i| f64::from((i * 7 % 3 == 0) as u8))
        .collect();
    let w: Vec<f64> = (0..rows).map(|i| 0.5 + f64::from(i % 4)).collect();
    let x: Vec<f64> = (0..rows).map(|i| f64::from(i) / 10.0 - 1.0).collect();
    let (ones, zeros) = (vec![1.0; rows as usize], vec![0.0; rows as usize]);
    for (family, y) in [
        (Family::Binomial, y.clone()),
        (
            Family::Poisson,
            // Counts (repeated, so a batch's residual per count is
            // reused), a fraction and a count past the table's end.
            y.iter()
                .zip(&x)
                .enumerate()
                .map(|(i, (a, b))| match i {
                    5 => 2.5,
                    11 => 300.0,
                    _ => a + (b * 3.0).abs().floor(),
                })
                .collect(),
        ),
    ] {
        let config = IrlsConfig {
            family,
            link: family.default_link(),
            beta: Some(vec![0.2, -0.4]),
            null_mu: NullMean::Value(0.3),
            xtwx: true,
        };
        let mut sums = IrlsSums::new(2);
        sums.update(&config, &y, &ones, &zeros, &w, &[&ones, &x]);
        let expected = y.iter().zip(&w).fold(0.0, |total, (&y, &w)| {
            total + family.deviance_residual(y, 0.3, w)
        });
        assert_eq!(sums.null_deviance, expected, "{family}");
        assert_eq!(sums.flat_len(), sums.to_vec().len());
    }
}

#[test]
fn a_block_with_a_row_not_admitted_goes_through_the_general_loop() {
    // Fourteen logistic rows (three groups of four and two left over),
    // one a proportion (y = 0.5) and one out of range (y = 2), which
    // the vectorized pass does not admit; it still writes a working
    // weight for every row. The block must come out as the general
    // loop alone gives it, which counts the row out of range as
    // invalid and leaves it out of X'WX, whatever the buffers held.
    let rows = 14;
    let x: Vec<f64> = (0..rows).map(|i| 0.25 * i as f64 - 1.0).collect();
    let admitted: Vec<f64> = (0..rows).map(|i| (i % 3 == 0) as u8 as f64).collect();
    let mut y = admitted.clone();
    (y[9], y[10]) = (0.5, 2.0);
    let (ones, zeros) = (vec![1.0; rows], vec![0.0; rows]);
    let eta: Vec<f64> = x.iter().map(|x| 0.2 - 0.4 * x).collect();
    let config = IrlsConfig {
        family: Family::Binomial,
        link: Link::Logit,
        beta: Some(vec![0.2, -0.4]),
        null_mu: NullMean::Value(0.3),
        xtwx: true,
    };
    let block = |y, weight| Rows {
        y,
        trials: &ones,
        offset: &zeros,
        weight,
        eta: Some(&eta),
    };
    let mut sums = IrlsSums::new(2);
    let (mut working, mut wz) = (vec![7.0; rows], vec![7.0; rows]);
    sums.add_rows(&config, block(&y, &ones), &mut working, &mut wz);
    let mut expected = IrlsSums::new(2);
    let (mut expected_working, mut expected_wz) = (vec![0.0; rows], vec![0.0; rows]);
    expected.add_general_rows(
        &config,
        block(&y, &ones),
        &mut expected_working,
        &mut expected_wz,
    );
    assert_eq!(sums.to_vec(), expected.to_vec());
    assert_eq!((sums.invalid, working[10]), (1.0, 0.0));
    assert_eq!(working, expected_working);
    assert_eq!(wz, expected_wz);
    // Without the proportion and the count the vectorized pass takes
    // the groups of four, and agrees with the general loop to
    // rounding; a row out of range among the two left over is left
    // out of X'WX whatever the buffers held.
    let mut tail_out = admitted.clone();
    tail_out[13] = 2.0;
    let mut vectorized = IrlsSums::new(2);
    let (mut working, mut wz) = (vec![7.0; rows], vec![7.0; rows]);
    vectorized.add_rows(&config, block(&tail_out, &ones), &mut working, &mut wz);
    let mut general = IrlsSums::new(2);
    let (mut expected_working, mut expected_wz) = (vec![0.0; rows], vec![0.0; rows]);
    general.add_general_rows(
        &config,
        block(&tail_out, &ones),
        &mut expected_working,
        &mut expected_wz,
    );
    assert_eq!((vectorized.invalid, working[13], wz[13]), (1.0, 0.0, 0.0));
    let (a, b) = (vectorized.deviance, general.deviance);
    assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} vs {b}");
    for (a, b) in working.iter().zip(&expected_working) {
        assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} vs {b}");
    }
}

#[test]
fn a_round_without_xtwx_has_the_same_scalars_and_zero_cross_products() {
    // Three blocks and a bit, so that block boundaries and the rows
    // past the last group of four are crossed; binomial and poisson
    // take the vectorized pass, gamma the general loop; the first
    // round (no beta) and a later one.
    let rows = 3 * BLOCK + 7;
    let x1: Vec<f64> = (0..rows)
        .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
        .collect();
    let x2: Vec<f64> = (0..rows).map(|i| ((i * 13) % 29) as f64 / 10.0).collect();
    let ones = vec![1.0; rows];
    let zeros = vec![0.0; rows];
    let weight: Vec<f64> = (0..rows).map(|i| 1.0 + (i % 3) as f64).collect();
    let binary: Vec<f64> = (0..rows).map(|i| ((i * 7) % 5 < 2) as u8 as f64).collect();
    let counts: Vec<f64> = (0..rows).map(|i| ((i * 11) % 6) as f64).collect();
    let positive: Vec<f64> = (0..rows).map(|i| 0.5 + ((i * 3) % 7) as f64).collect();
    for (family, link, y) in [
        (Family::Binomial, Link::Logit, &binary),
        (Family::Poisson, Link::Log, &counts),
        (Family::Gamma, Link::Log, &positive),
    ] {
        for beta in [None, Some(vec![0.1, -0.2, 0.05])] {
            for prior in [&ones, &weight] {
                let full = IrlsConfig {
                    family,
                    link,
                    beta: beta.clone(),
                    null_mu: NullMean::Value(if family == Family::Binomial { 0.4 } else { 2.0 }),
                    xtwx: true,
                };
                let last = IrlsConfig {
                    xtwx: false,
                    ..full.clone()
                };
                let x: [&[f64]; 3] = [&ones, &x1, &x2];
                let (mut a, mut b) = (IrlsSums::new(3), IrlsSums::new(3));
                a.update(&full, y, &ones, &zeros, prior, &x);
                b.update(&last, y, &ones, &zeros, prior, &x);
                let scalars = |s: &IrlsSums| s.to_vec()[..SCALARS].to_vec();
                assert!(scalars(&a).iter().all(|v| v.is_finite()), "{family}");
                assert_eq!(scalars(&a), scalars(&b), "{family}");
                assert!(a.xtwx.iter().all(|v| *v != 0.0), "{family}");
                assert!(b.xtwx.iter().chain(&b.xtwz).all(|v| *v == 0.0));
            }
        }
    }
}

#[tokio::test]
async fn merge_of_split_states_equals_one_pass() {
    crate::testing::assert_split_invariant(
        "irls_step('family=poisson;beta=0.5,0.001', c, 1.0, 0.0, 1.0, 1.0, a)",
    )
    .await;
    crate::testing::assert_split_invariant(
        "irls_step('family=gaussian', c, 1.0, 0.0, 1.0, 1.0, a, b)",
    )
    .await;
}
