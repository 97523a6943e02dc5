//! Tests of a site's checks of a secure session: whom it shares with
//! (listed peers) and which thresholds it accepts.

use super::*;
use crate::protocol::secure::SignedKey;
use crate::site::release::identity::SiteIdentity;

fn keys(i: u8) -> ParticipantKeys {
    ParticipantKeys {
        mask_key: [i; 32],
        cipher_key: [i + 100; 32],
        self_commitment: [i + 200; 32],
        list_key: [i + 50; 32],
        graph_commitment: [i + 60; 32],
        signed: None,
    }
}

#[test]
fn only_keys_signed_by_distinct_listed_peers_are_shared_with() {
    let session = SecureSession::fresh(vec!["me".into(), "b".into(), "c".into()]);
    let ids: Vec<SiteIdentity> = (0..4)
        .map(|_| SiteIdentity::generate().unwrap().0)
        .collect();
    let peers = [ids[1].public_key(), ids[2].public_key()];
    let request = |signed: Vec<Option<SignedKey>>| ShareRequest {
        nonces: Vec::new(),
        session: session.clone(),
        keys: (0..3)
            .map(|k| {
                let mut keys = keys(k as u8 + 1);
                keys.signed = signed.get(k).copied().flatten();
                Some(keys)
            })
            .collect(),
    };
    let own = Some(ids[0].public_key());
    let sign = |i: usize, k: usize| Some(ids[i].sign(&session.id, &keys(k as u8 + 1).digest()));
    let good = request(vec![sign(0, 0), sign(1, 1), sign(2, 2)]);
    assert_eq!(
        check_participants(&good, (0, &[1, 2]), own, &peers, 3),
        Ok(())
    );
    assert!(check_participants(&good, (0, &[1, 2]), own, &peers, 4).is_err());
    for signed in [
        // An invented participant: unsigned, or signed by an unlisted key.
        vec![sign(0, 0), sign(1, 1), None],
        vec![sign(0, 0), sign(1, 1), sign(3, 2)],
        // A listed peer's signature of another site's keys.
        vec![sign(0, 0), sign(1, 1), sign(2, 1)],
        // One peer counted twice; the site itself as a peer.
        vec![sign(0, 0), sign(1, 1), sign(1, 2)],
        vec![sign(0, 0), sign(1, 1), sign(0, 2)],
    ] {
        let err = check_participants(
            &request(signed),
            (0, &[1, 2]),
            own,
            &[peers[0], peers[1], ids[0].public_key()],
            3,
        );
        assert!(err.is_err());
    }
    // Without peers, only the count of sites with keys.
    assert_eq!(
        check_participants(&request(vec![]), (0, &[1, 2]), own, &[], 3),
        Ok(())
    );
    assert!(check_participants(&request(vec![]), (0, &[1, 2]), own, &[], 4).is_err());
    let mut one_missing = request(vec![]);
    one_missing.keys[2] = None;
    assert!(check_participants(&one_missing, (0, &[1, 2]), own, &[], 3).is_err());
}

#[test]
fn a_threshold_below_a_majority_or_the_floor_is_refused() {
    let session = |n: usize, t: usize| {
        SecureSession::fresh((0..n).map(|i| format!("s{i}")).collect()).with_threshold(t)
    };
    let none = SiteFloor::default();
    assert!(check_threshold(&session(5, 3), 5, none).is_ok());
    assert!(check_threshold(&session(5, 5), 5, none).is_ok());
    // Not a strict majority: two disjoint sets of t sites would exist.
    assert!(check_threshold(&session(5, 2), 5, none).is_err());
    assert!(check_threshold(&session(4, 2), 4, none).is_err());
    // Above n, or below the site's min_secure_clients.
    assert!(check_threshold(&session(5, 6), 5, none).is_err());
    let four = SiteFloor {
        min_secure_clients: 4,
        federation: 0,
    };
    let err = check_threshold(&session(5, 3), 5, four)
        .unwrap_err()
        .to_string();
    assert!(err.contains("min_secure_clients 4"), "{err}");
    assert!(check_threshold(&session(1, 1), 1, none).is_ok());
}

#[test]
fn a_site_with_peers_refuses_a_threshold_of_two_thirds_or_less() {
    let session = |n: usize, t: usize| {
        SecureSession::fresh((0..n).map(|i| format!("s{i}")).collect()).with_threshold(t)
    };
    // Peers listed, the round the whole federation.
    let peered = SiteFloor {
        min_secure_clients: 0,
        federation: 1,
    };
    // The least t > 2n/3, for each n: two lists of t signers share at
    // least 2t - n > n/3 of them.
    for (n, least) in [(2, 2), (3, 3), (4, 3), (5, 4), (6, 5), (7, 5), (101, 68)] {
        assert_eq!(peered.least(n), least, "n = {n}");
        assert!(3 * least > 2 * n);
        assert!(check_threshold(&session(n, least), n, peered).is_ok());
        if least > 1 {
            let err = check_threshold(&session(n, least - 1), n, peered)
                .unwrap_err()
                .to_string();
            assert!(err.contains("more than two thirds"), "{err}");
        }
    }
    // One site alone is no secure sum: a total over it is its state.
    assert_eq!(peered.least(1), 2);
    assert!(check_threshold(&session(1, 1), 1, peered).is_err());
    // The site's own floor still counts, and says so.
    let five = SiteFloor {
        min_secure_clients: 5,
        federation: 5,
    };
    let err = check_threshold(&session(5, 4), 5, five)
        .unwrap_err()
        .to_string();
    assert!(err.contains("min_secure_clients 5"), "{err}");
}

#[test]
fn a_peered_sites_total_stands_on_its_honest_minimum_beyond_the_colluders() {
    let session = |n: usize, t: usize| {
        SecureSession::fresh((0..n).map(|i| format!("s{i}")).collect()).with_threshold(t)
    };
    // A worker's default min_secure_clients of 3, 13 listed sites (4 may
    // collude): t >= 6, whatever the round; the whole federation 9.
    let floor = SiteFloor {
        min_secure_clients: 3,
        federation: 13,
    };
    for (n, least) in [(6, 6), (7, 6), (8, 7), (10, 8), (11, 8), (13, 9)] {
        assert_eq!(floor.least(n), least, "n = {n}");
        assert!(least >= 4 + HONEST_BEHIND_A_TOTAL);
    }
    // (n + c)/2 + 1 >= c + 2 once n >= c + 2: the honest minimum binds
    // only over c + 1 sites or fewer, the victim and its colluders.
    let err = check_threshold(&session(5, 5), 5, floor)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("at least 6 (the 4 sites of this site's federation of 13 that may collude with the coordinator (fewer than a third) and 2 more"),
        "{err}"
    );
    assert!(err.contains("more of the federation's sites"), "{err}");
    assert!(check_threshold(&session(6, 6), 6, floor).is_ok());
    // k honest sites behind every total: min_secure_clients = c + k.
    let five_honest = SiteFloor {
        min_secure_clients: 4 + 5,
        federation: 13,
    };
    assert_eq!(five_honest.least(7), 9);
    // Without peers the rule is a strict majority and the floor.
    let unpeered = SiteFloor {
        min_secure_clients: 3,
        federation: 0,
    };
    assert_eq!(unpeered.least(5), 3);
}

#[test]
fn a_round_over_part_of_a_peered_federation_needs_more_than_half_of_n_plus_its_colluders() {
    let session = |n: usize, t: usize| {
        SecureSession::fresh((0..n).map(|i| format!("s{i}")).collect()).with_threshold(t)
    };
    // 13 listed sites tolerate 4 colluders: a round over 7 of them needs
    // t > (7 + 4)/2, so two lists of t share more than 4 signers.
    let thirteen = SiteFloor {
        min_secure_clients: 0,
        federation: 13,
    };
    assert_eq!(
        crate::protocol::secure::threshold::tolerated_colluders(13),
        4
    );
    for (n, least) in [(7, 6), (9, 7), (13, 9)] {
        assert_eq!(thirteen.least(n), least, "n = {n}");
        assert!(2 * least > n + 4);
        assert!(check_threshold(&session(n, least), n, thirteen).is_ok());
        let err = check_threshold(&session(n, least - 1), n, thirteen)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least"), "{err}");
    }
    let err = check_threshold(&session(7, 5), 7, thirteen)
        .unwrap_err()
        .to_string();
    assert!(err.contains("federation of N = 13 sites"), "{err}");
    // Too few of the federation for any threshold: refused, saying so.
    let err = check_threshold(&session(4, 4), 4, thirteen)
        .unwrap_err()
        .to_string();
    assert!(err.contains("more of the federation's sites"), "{err}");
    // A round of 5: the victim and its 4 colluders could make it; no
    // threshold over 5 leaves two honest sites behind the total.
    assert_eq!(thirteen.least(5), 6);
    let err = check_threshold(&session(5, 5), 5, thirteen)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the 4 sites of this site's federation of 13 that may collude"),
        "{err}"
    );
    assert!(err.contains("more of the federation's sites"), "{err}");
    // Peered rounds are full at any size: over 250 of a federation of 300
    // (99 colluders) t > (250 + 99)/2.
    let large = SiteFloor {
        min_secure_clients: 0,
        federation: 300,
    };
    assert_eq!(large.least(250), 175);
    assert_eq!(large.least(120), 110);
    let err = check_threshold(&session(250, 174), 250, large)
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than (n + c)/2 = 174.5"), "{err}");
    assert_eq!(large.least(300), 201);
    // The federation's size counts each identity once, its own included.
    let listed = [[1; 32], [2; 32], [3; 32]];
    assert_eq!(
        crate::protocol::secure::threshold::federation_size(&listed, Some([1; 32])),
        3
    );
    assert_eq!(
        crate::protocol::secure::threshold::federation_size(&listed, Some([9; 32])),
        4
    );
    assert_eq!(
        crate::protocol::secure::threshold::federation_size(&[], Some([9; 32])),
        0
    );
}

#[test]
fn a_session_that_cuts_the_dp_noise_finer_than_the_sites_count_is_refused() {
    let session = |n: usize, t: usize, d: usize| {
        SecureSession::fresh((0..n).map(|i| format!("s{i}")).collect())
            .with_threshold(t)
            .with_noise_shares(d)
    };
    // Without peers: any d from 1 to t.
    let none = SiteFloor::default();
    for d in 1..=5 {
        assert!(check_session(&session(9, 5, d), none).is_ok(), "d {d}");
    }
    let err = check_session(&session(9, 5, 0), none)
        .unwrap_err()
        .to_string();
    assert!(err.contains("without a DP share count"), "{err}");
    for d in [6, 9] {
        let err = check_session(&session(9, 5, d), none)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("into {d} shares"))
                && err.contains("at most 5 (its threshold 5)"),
            "{err}"
        );
    }
    // With peers (a federation of 13, c = 4): at most t − c.
    let peered = SiteFloor {
        min_secure_clients: 3,
        federation: 13,
    };
    assert!(check_session(&session(13, 9, 5), peered).is_ok());
    let err = check_session(&session(13, 9, 9), peered)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("at most 5 (its threshold 9 less the 4 sites"),
        "{err}"
    );
    // The threshold is checked first, over the session's sites.
    let err = check_session(&session(13, 5, 1), peered)
        .unwrap_err()
        .to_string();
    assert!(err.contains("threshold 5 over 13 sites"), "{err}");
    // A session made by `fresh` asks a full draw of every site: accepted.
    let fresh = SecureSession::fresh((0..13).map(|i| format!("s{i}")).collect()).with_threshold(9);
    assert_eq!(fresh.noise_shares, 1);
    assert!(check_session(&fresh, peered).is_ok());
}
