//! Sizes as people write and read them: `256M`, `2G`, `11.8G` (binary
//! units). One parser and one printer for every command and setting.

/// Bytes as people read them (`64M`, `1.5G`), in a form [`parse_size`]
/// reads back (rounded to a tenth of the unit when not exact).
pub fn format_size(b: u64) -> String {
    Size(b).to_string()
}

/// A byte count as people read it (`64K`, `1.5G`), formatted without
/// allocating: usable in a signal handler's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const U: [(&str, u64); 4] = [
            ("T", 1 << 40),
            ("G", 1 << 30),
            ("M", 1 << 20),
            ("K", 1 << 10),
        ];
        let b = self.0;
        for (u, m) in U {
            if b >= m {
                #[allow(clippy::cast_precision_loss)] // one decimal shown
                let v = b as f64 / m as f64;
                return if b.is_multiple_of(m) {
                    write!(f, "{}{u}", b / m)
                } else {
                    write!(f, "{v:.1}{u}")
                };
            }
        }
        write!(f, "{b}B")
    }
}

/// Parse a size: `4096`, `64K`, `256M`, `2G`, `1T` (binary units; `KiB`,
/// `MB`, … also accepted, all meaning powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size; write e.g. 256M or 2G".into());
    }
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ if num.is_empty() => return Err(format!("{t:?} is not a size; write e.g. 256M or 2G")),
        other => {
            return Err(format!(
                "unknown unit {other:?}; use K, M, G or T (e.g. 256M)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{num:?} is not a number; write e.g. 256M or 2G"))?;
    if !v.is_finite() || v < 0.0 {
        return Err("size must be a positive number".into());
    }
    let bytes = v * mult as f64;
    if bytes > u64::MAX as f64 / 2.0 {
        return Err("size is too large".into());
    }
    // In range: finite, non-negative and at most u64::MAX / 2 (checked above).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bytes = bytes as u64;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_and_parse_back() {
        for (b, s) in [
            (0, "0B"),
            (4096, "4K"),
            (256 << 20, "256M"),
            (3 << 29, "1.5G"),
        ] {
            assert_eq!(format_size(b), s);
            assert_eq!(parse_size(s).unwrap(), b);
        }
        assert_eq!(format_size(12_342_046 << 10), "11.8G");
        assert!(parse_size("12Q").unwrap_err().contains("unknown unit"));
        assert!(parse_size("").unwrap_err().contains("empty"));
        assert!(parse_size("-1M").is_err());
    }
}
