//! How results read back from their JSON. serde_json writes a float that is
//! not finite (a run that failed has no time) as `null`; reading it back
//! gives NaN again, so a result file round-trips.

use serde::{Deserialize, Deserializer};

/// A float field that may have been written as `null`.
pub fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The value of a float field an older result lacks: unknown.
pub fn nan() -> f64 {
    f64::NAN
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::nan_if_null")]
        x: f64,
    }

    #[test]
    fn null_reads_back_as_nan_and_numbers_as_themselves() {
        let t: T = serde_json::from_str(r#"{"x": null}"#).unwrap();
        assert!(t.x.is_nan());
        let t: T = serde_json::from_str(r#"{"x": 2.5}"#).unwrap();
        assert_eq!(t.x, 2.5);
        assert!(serde_json::from_str::<T>(r#"{"x": "2"}"#).is_err());
    }
}
