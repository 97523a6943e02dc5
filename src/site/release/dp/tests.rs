//! Tests of the site's DP settings: table options that set them, and the
//! trimmed epsilons.

use super::*;

#[test]
fn options_set_dp_settings() {
    let p = DpPolicy::from_options(&[
        ("dp_budget".into(), "10".into()),
        ("require_dp".into(), "true".into()),
        ("dp_domain.region".into(), "east, north,south,west".into()),
        ("min_group_rows".into(), "5".into()),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(p.budget, Some(10.0));
    assert!(p.require_dp);
    assert_eq!(p.domains["region"], ["east", "north", "south", "west"]);
    assert_eq!(
        DpPolicy::from_options(&[("timeout".into(), "1s".into())]).unwrap(),
        None
    );
    assert!(DpPolicy::from_options(&[("dp_budget".into(), "-1".into())]).is_err());
    assert_eq!(p.max_epsilon, DEFAULT_MAX_EPSILON);
    let capped = DpPolicy::from_options(&[("DP_MAX_EPSILON".into(), "0.5".into())])
        .unwrap()
        .unwrap();
    assert_eq!(capped.max_epsilon, 0.5);
    for bad in ["0", "-1", "inf", "NaN", "1e300", "x"] {
        assert!(
            DpPolicy::default().set("dp_max_epsilon", bad).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn trimmed_epsilons() {
    assert_eq!(trim(0.30000000000000004), "0.3");
    assert_eq!(trim(10.0), "10");
}
