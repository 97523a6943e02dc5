//! A data owner's privacy-budget ledger: the ε each analyst has spent on
//! each table at this site.
//!
//! Every DP query is debited here, at the site, before its state leaves;
//! a query that would overspend is refused. Debits are counted in units of
//! 10⁻⁹ ε (an ε is rounded up to a whole unit, so sums of ε like 0.1 stay
//! exact and a site never undercounts). A ledger backed by a file
//! rewrites the file (write, fsync, rename) inside the same lock as the
//! debit, so concurrent queries lose no debit and a restarted worker
//! starts where it stopped. One ledger file belongs to one process.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{FedError, Result};

/// The start of the error a debit that could not be written gives (a
/// worker recognizes it, to tell the analyst without the path).
pub const LEDGER_WRITE_FAILED: &str = "cannot record the privacy budget";

/// Units per ε.
const UNITS: f64 = 1e9;

/// The largest ε the ledger counts, in one debit, one budget or one
/// analyst's total: 2^33 ε, so that any two such amounts add up without
/// leaving `u64` and a spent total never saturates (or reaches inf/NaN as
/// a float). No sensible ε comes near it.
pub const MAX_EPSILON: f64 = (1u64 << 33) as f64;

/// ε in whole units, rounded up (but an ε given with nine decimals is
/// exact); `None` for an ε that is not finite, is negative, or is above
/// [`MAX_EPSILON`].
pub fn units(epsilon: f64) -> Option<u64> {
    if !(epsilon.is_finite() && (0.0..=MAX_EPSILON).contains(&epsilon)) {
        return None;
    }
    let x = epsilon * UNITS;
    let nearest = x.round();
    Some(if (x - nearest).abs() < 1e-3 {
        nearest as u64
    } else {
        x.ceil() as u64
    })
}

fn epsilon(units: u64) -> f64 {
    units as f64 / UNITS
}

/// A refused debit: what the analyst has left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overspend {
    pub asked: f64,
    pub spent: f64,
    pub budget: f64,
}

impl Overspend {
    /// The budget left.
    pub fn remaining(&self) -> f64 {
        (self.budget - self.spent).max(0.0)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct LedgerFile {
    #[serde(default)]
    entry: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    analyst: String,
    table: String,
    /// Spent ε in units of 10⁻⁹.
    spent_nano_epsilon: u64,
}

/// The ε spent per analyst and table.
#[derive(Debug, Default)]
pub struct Ledger {
    file: Option<PathBuf>,
    spent: Mutex<BTreeMap<(String, String), u64>>,
}

impl Ledger {
    /// A ledger kept in memory (an in-process table's, per session).
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A ledger kept in `path`, read from it if it exists.
    pub fn open(path: &Path) -> Result<Self> {
        let mut spent = BTreeMap::new();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let file: LedgerFile = toml::from_str(&text).map_err(|e| {
                    FedError::InvalidArgument(format!(
                        "privacy-budget ledger {} is damaged ({e}); restore it from a backup: starting from zero would reset every analyst's budget",
                        path.display()
                    ))
                })?;
                for e in file.entry {
                    spent.insert((e.analyst, e.table), e.spent_nano_epsilon);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(FedError::InvalidArgument(format!(
                    "cannot read privacy-budget ledger {}: {e}",
                    path.display()
                )));
            }
        }
        Ok(Self {
            file: Some(path.to_path_buf()),
            spent: Mutex::new(spent),
        })
    }

    /// The ε `analyst` has spent on `table`.
    pub fn spent(&self, analyst: &str, table: &str) -> f64 {
        let spent = self.spent.lock().expect("not poisoned");
        epsilon(
            spent
                .get(&(analyst.to_string(), table.to_string()))
                .copied()
                .unwrap_or(0),
        )
    }

    /// Debits `asked` ε to `analyst` on `table`, unless that would pass
    /// `budget`; with a file, the debit is on disk when this returns `Ok`.
    /// An `asked` that is not a positive finite ε, or a total past
    /// [`MAX_EPSILON`], is refused as an overspend: the ledger never
    /// saturates.
    pub fn debit(
        &self,
        analyst: &str,
        table: &str,
        asked: f64,
        budget: Option<f64>,
    ) -> Result<std::result::Result<(), Overspend>> {
        let mut spent = self.spent.lock().expect("not poisoned");
        let key = (analyst.to_string(), table.to_string());
        let before = spent.get(&key).copied().unwrap_or(0);
        let most = units(MAX_EPSILON).expect("MAX_EPSILON fits");
        let limit = budget.map_or(most, |b| units(b).unwrap_or(most).min(most));
        let after = units(asked)
            .filter(|_| asked > 0.0)
            .and_then(|a| before.checked_add(a));
        let Some(after) = after.filter(|a| *a <= limit) else {
            return Ok(Err(Overspend {
                asked,
                spent: epsilon(before),
                budget: budget.unwrap_or(MAX_EPSILON),
            }));
        };
        spent.insert(key.clone(), after);
        if let Some(path) = &self.file
            && let Err(e) = write_atomically(path, &spent)
        {
            spent.insert(key, before);
            return Err(FedError::Io(std::io::Error::other(format!(
                "{LEDGER_WRITE_FAILED} in {}: {e}",
                path.display()
            ))));
        }
        Ok(Ok(()))
    }
}

fn write_atomically(path: &Path, spent: &BTreeMap<(String, String), u64>) -> std::io::Result<()> {
    let file = LedgerFile {
        entry: spent
            .iter()
            .map(|((analyst, table), units)| Entry {
                analyst: analyst.clone(),
                table: table.clone(),
                spent_nano_epsilon: *units,
            })
            .collect(),
    };
    let text = toml::to_string(&file).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(b"# fedsql privacy-budget ledger: spent epsilon per analyst and table, in units of 1e-9\n")?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenths_add_up_exactly_and_overspend_is_refused() {
        let ledger = Ledger::in_memory();
        for _ in 0..3 {
            ledger.debit("ana", "t", 0.1, Some(0.3)).unwrap().unwrap();
        }
        assert_eq!(ledger.spent("ana", "t"), 0.3);
        let refused = ledger
            .debit("ana", "t", 0.1, Some(0.3))
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.remaining(), 0.0);
        assert_eq!(
            ledger.spent("ana", "t"),
            0.3,
            "a refused query spends nothing"
        );
        assert_eq!(ledger.spent("bob", "t"), 0.0);
    }

    #[test]
    fn no_epsilon_saturates_the_ledger_or_makes_it_inf() {
        let ledger = Ledger::in_memory();
        for asked in [f64::INFINITY, f64::NAN, -1.0, 0.0, 4e12, MAX_EPSILON * 2.0] {
            assert!(
                ledger.debit("ana", "t", asked, None).unwrap().is_err(),
                "{asked}"
            );
        }
        assert_eq!(
            ledger.spent("ana", "t"),
            0.0,
            "refused debits spend nothing"
        );
        // The unlimited total stops at MAX_EPSILON rather than wrapping.
        ledger
            .debit("ana", "t", MAX_EPSILON, None)
            .unwrap()
            .unwrap();
        assert!(ledger.debit("ana", "t", 1.0, None).unwrap().is_err());
        assert_eq!(ledger.spent("ana", "t"), MAX_EPSILON);
        assert!(ledger.spent("ana", "t").is_finite());
    }

    #[test]
    fn a_file_ledger_survives_reopening() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("ledger.toml");
        let ledger = Ledger::open(&path).unwrap();
        ledger
            .debit("ana", "clinic", 1.25, Some(10.0))
            .unwrap()
            .unwrap();
        ledger.debit("bob", "clinic", 0.5, None).unwrap().unwrap();
        drop(ledger);
        let again = Ledger::open(&path).unwrap();
        assert_eq!(again.spent("ana", "clinic"), 1.25);
        assert_eq!(again.spent("bob", "clinic"), 0.5);
        std::fs::write(&path, "garbage = [").unwrap();
        assert!(Ledger::open(&path).is_err());
    }
}
