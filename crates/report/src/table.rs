//! Tables, the one shape every text and CSV result takes: a header and rows
//! of cells, printed either with columns as wide as their widest cell or as
//! CSV.

use std::fmt::{Display, Write as _};

/// A header and rows of cells, all strings already formatted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<T: Display>(header: &[T]) -> Table {
        Table {
            header: header.iter().map(ToString::to_string).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<T: Display>(&mut self, cells: &[T]) {
        self.rows
            .push(cells.iter().map(ToString::to_string).collect());
    }

    /// Every row after `indent`, columns two spaces apart and as wide as
    /// their widest cell: the first column (a name) left-aligned, the others
    /// (figures) right-aligned.
    pub fn text(&self, indent: &str) -> String {
        let rows = std::iter::once(&self.header).chain(&self.rows);
        let columns = rows.clone().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> = (0..columns)
            .map(|i| {
                rows.clone()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut s = String::new();
        for r in rows {
            let mut line = indent.to_string();
            for (i, c) in r.iter().enumerate() {
                let w = width[i];
                if i == 0 {
                    line.push_str(&format!("{c:<w$}"));
                } else {
                    line.push_str(&format!("  {c:>w$}"));
                }
            }
            s.push_str(line.trim_end());
            s.push('\n');
        }
        s
    }

    /// The header, then the rows; a field with a comma, quote or line break
    /// is quoted.
    pub fn csv(&self) -> String {
        let mut s = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let fields: Vec<String> = r.iter().map(|f| quote(f)).collect();
            s.push_str(&fields.join(","));
            s.push('\n');
        }
        s
    }
}

/// Several tables as one CSV text: a header before each one's rows.
pub fn csv(tables: &[Table]) -> String {
    tables.iter().map(Table::csv).collect()
}

fn quote(f: &str) -> String {
    if f.contains([',', '"', '\n']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_string()
    }
}

/// An optional figure as a cell (empty when absent).
pub fn opt<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// An optional figure as a text cell ("-" when absent).
pub fn dash<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A grid of `ids` × `ids`: rows `row_name(y)`, columns `col_name(x)`, the
/// cell of (x, y) from `cell`.
pub fn grid(
    ids: &[usize],
    corner: &str,
    name: impl Fn(&str, usize) -> String,
    cell: impl Fn(usize, usize) -> Option<String>,
) -> Table {
    let mut header = vec![corner.to_string()];
    header.extend(ids.iter().map(|x| name("col", *x)));
    let mut t = Table::new(&header);
    for y in ids {
        let mut row = vec![name("row", *y)];
        row.extend(ids.iter().map(|x| dash(cell(*x, *y))));
        t.row(&row);
    }
    t
}

/// A result's note, when it has one, after a blank line.
pub fn note(s: &mut String, note: Option<&str>) {
    if let Some(n) = note {
        let _ = write!(s, "\n{n}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_what_needs_it() {
        let mut c = Table::new(&["policy", "seconds"]);
        c.row(&["--membind=0", "1.5"]);
        c.row(&["a,b", "say \"x\""]);
        assert_eq!(
            c.csv(),
            "policy,seconds\n--membind=0,1.5\n\"a,b\",\"say \"\"x\"\"\"\n"
        );
        assert_eq!(csv(&[c.clone(), c.clone()]), c.csv().repeat(2));
        assert_eq!(opt(Some(3)), "3");
        assert_eq!(opt(None::<u64>), "");
        assert_eq!(dash(None::<u64>), "-");
    }

    #[test]
    fn text_columns_are_as_wide_as_their_widest_cell() {
        let mut t = Table::new(&["tier", "latency"]);
        t.row(&["L1", "1.2 ns"]);
        t.row(&["DRAM (node 0)", "95.0 ns"]);
        assert_eq!(
            t.text("  "),
            "  tier           latency\n  L1              1.2 ns\n  DRAM (node 0)  95.0 ns\n"
        );
    }

    #[test]
    fn a_grid_has_a_row_and_a_column_per_node() {
        let t = grid(
            &[0, 1],
            "X \\ Y",
            |k, n| format!("{k}{n}"),
            |x, y| (x != y).then(|| format!("{x}{y}")),
        );
        assert_eq!(
            t.text(""),
            "X \\ Y  col0  col1\nrow0      -    10\nrow1     01     -\n"
        );
    }
}
