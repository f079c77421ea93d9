//! The grid a bench measures: its cells (the full cache, then policy entry × budget) and the
//! aggregates of its rows per cell.

use std::collections::BTreeMap;

/// Every cell: ("none", 0), then every policy at the first budget, every policy at the next, ...
/// so that a run cut short has compared every policy at the budgets given first.
pub fn cells(policies: &[String], budgets: &[u32]) -> Vec<(String, u32)> {
    let mut c = vec![("none".to_string(), 0)];
    for &b in budgets {
        for p in policies {
            c.push((p.clone(), b));
        }
    }
    c
}

/// A budget in a table: "–" for the full cache's 0.
pub fn budget_label(b: u32) -> String {
    if b == 0 {
        "–".into()
    } else {
        b.to_string()
    }
}

/// An aggregate per cell of the grid, keyed by (policy entry, budget; 0 for the full cache).
pub struct PerCell<C> {
    /// The grid's cells, in table order.
    pub cells: Vec<(String, u32)>,
    by: BTreeMap<(String, u32), C>,
}

impl<C: Clone + Default> PerCell<C> {
    pub fn new(cells: &[(String, u32)]) -> PerCell<C> {
        PerCell {
            cells: cells.to_vec(),
            by: BTreeMap::new(),
        }
    }

    /// The aggregate of a cell, created empty at its first row; None for a cell outside the grid
    /// (rows of an earlier run with other policies or budgets are left out).
    pub fn add_to(&mut self, policy: &str, budget: u32) -> Option<&mut C> {
        if !self.cells.iter().any(|(p, b)| p == policy && *b == budget) {
            return None;
        }
        Some(self.by.entry((policy.to_string(), budget)).or_default())
    }

    /// The aggregate of a cell that some row reached.
    pub fn reached_mut(&mut self, policy: &str, budget: u32) -> Option<&mut C> {
        self.by.get_mut(&(policy.to_string(), budget))
    }

    /// A cell's aggregate, empty when no row reached it.
    pub fn get(&self, policy: &str, budget: u32) -> C {
        self.by
            .get(&(policy.to_string(), budget))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_in_table_order_and_rows_outside_the_grid_left_out() {
        let cells = cells(&["a".to_string(), "b".to_string()], &[32, 64]);
        let names: Vec<String> = cells.iter().map(|(p, b)| format!("{p}@{b}")).collect();
        assert_eq!(names, ["none@0", "a@32", "b@32", "a@64", "b@64"]);
        let mut per: PerCell<u32> = PerCell::new(&cells);
        *per.add_to("a", 32).unwrap() += 2;
        assert!(per.add_to("a", 128).is_none());
        assert!(per.reached_mut("b", 32).is_none());
        *per.reached_mut("a", 32).unwrap() += 1;
        assert_eq!((per.get("a", 32), per.get("b", 64)), (3, 0));
        assert_eq!(
            (budget_label(0), budget_label(64)),
            ("–".into(), "64".into())
        );
    }
}
