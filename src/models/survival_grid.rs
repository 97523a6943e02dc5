//! Survival on a grid coarser than the data: which estimate
//! `kaplan_meier` gives, and what it says.
//!
//! Each site's `life_table` state says whether any time falls strictly
//! inside an interval (a 0/1 flag). When none does, every distinct time is
//! a break and the product-limit estimate on the grid is R's `survfit`
//! exactly. When one does, the grid groups distinct times, and treating an
//! interval's events and censorings as if at its end overstates survival
//! (the censored are kept at risk for the whole interval). The default
//! (`method=auto`) is then the life-table (actuarial) estimate, with
//! n − c/2 at risk in an interval that n enter and c leave censored, as R's
//! `KMsurv::lifetab` computes it; `method=km` asks for the product-limit on
//! the grid, `method=actuarial` for the life table on any grid. A notice
//! says which estimate a grid that groups times gave.

use crate::error::{FedError, Result};

/// Which estimate of the survival `kaplan_meier` computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Estimate {
    /// The life table where the grid groups times, else the product-limit.
    Auto,
    /// The product-limit (Kaplan–Meier), events and censorings of an
    /// interval taken at its end.
    ProductLimit,
    /// The life table (actuarial): n − c/2 at risk.
    Actuarial,
}

impl Estimate {
    /// `method=auto|km|actuarial`.
    pub(crate) fn parse(function: &str, value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Estimate::Auto),
            "km" | "kaplan-meier" | "product-limit" => Ok(Estimate::ProductLimit),
            "actuarial" | "lifetab" | "life-table" => Ok(Estimate::Actuarial),
            other => Err(FedError::InvalidArgument(format!(
                "{function}: method `{other}`: use auto (the life table on a grid that groups times, else Kaplan–Meier), km or actuarial"
            ))),
        }
    }

    /// Whether the life table is used, given whether the grid groups times.
    pub(crate) fn actuarial(self, grouped: bool) -> bool {
        match self {
            Estimate::Auto => grouped,
            Estimate::ProductLimit => false,
            Estimate::Actuarial => true,
        }
    }
}

/// The notice of `kaplan_meier` on a grid that groups times.
pub(crate) fn km_notice(actuarial: bool) -> String {
    if actuarial {
        "kaplan_meier: the grid groups distinct times (some fall strictly inside an interval), so survival is the life-table (actuarial) estimate, n_risk − n_censor/2 at risk in each interval, as KMsurv::lifetab; it differs from R's survfit on the exact times (a break at every distinct time gives survfit exactly; method=km gives the product-limit on this grid)".into()
    } else {
        "kaplan_meier: the grid groups distinct times (some fall strictly inside an interval), and method=km takes each interval's events and censorings as if at its end, which overstates survival; the default (method=auto) gives the life-table estimate, and a break at every distinct time gives R's survfit exactly".into()
    }
}

/// The notice of `logrank_test` on a grid that groups times.
pub(crate) const LOGRANK_NOTICE: &str = "logrank_test: the grid groups distinct times (some fall strictly inside an interval), so the statistic is the log-rank test of the grouped times, which differs from R's survdiff on the exact times (a break at every distinct time gives survdiff exactly)";

/// One interval's survival step: (the factor the survival is multiplied
/// by, the term Greenwood's variance adds), from `n` entering, `d` events
/// and `c` censorings; `None` when nothing changes.
pub(crate) fn step(n: f64, d: f64, c: f64, actuarial: bool) -> Option<(f64, f64)> {
    let at_risk = if actuarial { n - c / 2.0 } else { n };
    if at_risk <= 0.0 || d <= 0.0 {
        return None;
    }
    let greenwood = if at_risk > d {
        d / (at_risk * (at_risk - d))
    } else {
        f64::INFINITY
    };
    Some((1.0 - d / at_risk, greenwood))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_life_table_takes_half_the_censored_off_the_risk_set() {
        // 10 enter, 2 die, 4 are censored: 8 at risk.
        let (factor, greenwood) = step(10.0, 2.0, 4.0, true).unwrap();
        assert_eq!(factor, 0.75);
        assert_eq!(greenwood, 2.0 / (8.0 * 6.0));
        assert_eq!(step(10.0, 2.0, 4.0, false).unwrap().0, 0.8);
        assert!(step(10.0, 0.0, 4.0, true).is_none());
        assert!(Estimate::Auto.actuarial(true) && !Estimate::Auto.actuarial(false));
        assert!(Estimate::parse("kaplan_meier", "KM").unwrap() == Estimate::ProductLimit);
        assert!(Estimate::parse("kaplan_meier", "exact").is_err());
    }
}
