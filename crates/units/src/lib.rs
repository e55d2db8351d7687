//! Human-readable quantities for configuration files: byte sizes (`"10MiB"`, `"1.5TiB"`,
//! `"980GB"`), byte rates (`"200MiB/s"`) and durations (`"30m"`, `"1h30m"`, `"250ms"`).
//!
//! This crate owns parsing and display only. It knows nothing about what a size is used for;
//! the configuration layers above it name the field when a value is rejected.
//!
//! Decimal prefixes (`kB`, `MB`, `GB`, `TB`, `PB`) are powers of 1000, binary prefixes (`KiB`,
//! `MiB`, `GiB`, `TiB`, `PiB`) powers of 1024, as in IEC 80000-13. A bare number is bytes.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Why a quantity did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty value")]
    Empty,
    #[error("{0:?} is not a number followed by a unit")]
    NotANumber(String),
    #[error("unknown unit {unit:?} in {input:?} (expected one of {expected})")]
    UnknownUnit {
        input: String,
        unit: String,
        expected: &'static str,
    },
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{0:?} is too large")]
    Overflow(String),
    #[error("{0:?} is not a rate: expected a size per second such as \"200MiB/s\"")]
    NotARate(String),
}

const SIZE_UNITS: &str = "B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB";
const DURATION_UNITS: &str = "ms, s, m, h, d";

/// Splits `"1.5 TiB"` into `(1.5, "TiB")`.
fn split_number(input: &str) -> Result<(f64, &str), ParseError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(ParseError::Empty);
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let value: f64 = num
        .parse()
        .map_err(|_| ParseError::NotANumber(input.to_owned()))?;
    if !value.is_finite() {
        return Err(ParseError::NotANumber(input.to_owned()));
    }
    if value < 0.0 {
        return Err(ParseError::Negative(input.to_owned()));
    }
    Ok((value, unit.trim()))
}

fn size_multiplier(unit: &str) -> Option<f64> {
    Some(match unit {
        "" | "B" | "b" => 1.0,
        "kB" | "KB" | "k" | "K" => 1e3,
        "MB" | "M" => 1e6,
        "GB" | "G" => 1e9,
        "TB" | "T" => 1e12,
        "PB" | "P" => 1e15,
        "KiB" | "Ki" => 1024.0,
        "MiB" | "Mi" => 1024.0 * 1024.0,
        "GiB" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "PiB" | "Pi" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

fn to_u64(value: f64, input: &str) -> Result<u64, ParseError> {
    let rounded = value.round();
    if rounded >= u64::MAX as f64 {
        return Err(ParseError::Overflow(input.to_owned()));
    }
    Ok(rounded as u64)
}

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn bytes(self) -> u64 {
        self.0
    }
    pub const fn kib(n: u64) -> Self {
        Self(n * 1024)
    }
    pub const fn mib(n: u64) -> Self {
        Self(n * 1024 * 1024)
    }
    pub const fn gib(n: u64) -> Self {
        Self(n * 1024 * 1024 * 1024)
    }
}

impl FromStr for ByteSize {
    type Err = ParseError;
    fn from_str(input: &str) -> Result<Self, ParseError> {
        let (value, unit) = split_number(input)?;
        let mult = size_multiplier(unit).ok_or_else(|| ParseError::UnknownUnit {
            input: input.to_owned(),
            unit: unit.to_owned(),
            expected: SIZE_UNITS,
        })?;
        Ok(Self(to_u64(value * mult, input)?))
    }
}

/// Formats with the largest binary unit that keeps the value at or above 1, e.g. `1.5GiB`.
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_binary(f, self.0 as f64, "")
    }
}

fn write_binary(f: &mut fmt::Formatter<'_>, bytes: f64, suffix: &str) -> fmt::Result {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || (value - value.round()).abs() < 1e-9 {
        write!(f, "{}{}{suffix}", value.round(), UNITS[unit])
    } else {
        let text = format!("{value:.2}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        write!(f, "{text}{}{suffix}", UNITS[unit])
    }
}

/// Bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Rate(pub f64);

impl Rate {
    pub const fn bytes_per_sec(self) -> f64 {
        self.0
    }
}

impl FromStr for Rate {
    type Err = ParseError;
    fn from_str(input: &str) -> Result<Self, ParseError> {
        let s = input.trim();
        let Some(size) = s.strip_suffix("/s") else {
            return Err(ParseError::NotARate(input.to_owned()));
        };
        let (value, unit) = split_number(size)?;
        let mult = size_multiplier(unit).ok_or_else(|| ParseError::UnknownUnit {
            input: input.to_owned(),
            unit: unit.to_owned(),
            expected: SIZE_UNITS,
        })?;
        Ok(Self(value * mult))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_binary(f, self.0, "/s")
    }
}

/// A duration written as a sum of parts: `"1h30m"`, `"90s"`, `"250ms"`, `"0s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl FromStr for HumanDuration {
    type Err = ParseError;
    fn from_str(input: &str) -> Result<Self, ParseError> {
        let mut rest = input.trim();
        if rest.is_empty() {
            return Err(ParseError::Empty);
        }
        let mut total = 0.0_f64;
        while !rest.is_empty() {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .unwrap_or(rest.len());
            if end == 0 {
                return Err(ParseError::NotANumber(input.to_owned()));
            }
            let (num, tail) = rest.split_at(end);
            let value: f64 = num
                .parse()
                .map_err(|_| ParseError::NotANumber(input.to_owned()))?;
            if value < 0.0 {
                return Err(ParseError::Negative(input.to_owned()));
            }
            let unit_end = tail
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(tail.len());
            let (unit, next) = tail.split_at(unit_end);
            let secs = match unit.trim() {
                "ms" => 1e-3,
                "s" | "sec" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3600.0,
                "d" => 86400.0,
                other => {
                    return Err(ParseError::UnknownUnit {
                        input: input.to_owned(),
                        unit: other.to_owned(),
                        expected: DURATION_UNITS,
                    });
                }
            };
            total += value * secs;
            rest = next.trim_start();
        }
        Duration::try_from_secs_f64(total)
            .map(Self)
            .map_err(|_| ParseError::Overflow(input.to_owned()))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        if secs < 1.0 && secs > 0.0 {
            return write!(f, "{}ms", (secs * 1e3).round());
        }
        let whole = self.0.as_secs();
        let (h, m, s) = (whole / 3600, (whole % 3600) / 60, whole % 60);
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if m > 0 {
            write!(f, "{m}m")?;
        }
        if s > 0 || (h == 0 && m == 0) {
            write!(f, "{s}s")?;
        }
        Ok(())
    }
}

macro_rules! serde_via_str {
    ($ty:ty, $expect:literal, $from_int:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        #[allow(clippy::redundant_closure_call)]
                        Ok($from_int(v))
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        let v = u64::try_from(v).map_err(|_| E::custom("must not be negative"))?;
                        self.visit_u64(v)
                    }
                }
                d.deserialize_any(V)
            }
        }
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}

serde_via_str!(
    ByteSize,
    "a size such as \"10MiB\" or a number of bytes",
    ByteSize
);
serde_via_str!(Rate, "a rate such as \"200MiB/s\"", |v: u64| Rate(v as f64));
serde_via_str!(
    HumanDuration,
    "a duration such as \"30m\" or a number of seconds",
    |v: u64| HumanDuration(Duration::from_secs(v))
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_both_unit_systems() {
        assert_eq!("10MiB".parse::<ByteSize>(), Ok(ByteSize(10 * 1024 * 1024)));
        assert_eq!("980GB".parse::<ByteSize>(), Ok(ByteSize(980_000_000_000)));
        assert_eq!(
            "1.5TiB".parse::<ByteSize>(),
            Ok(ByteSize(1024 * 1024 * 1024 * 1024 * 3 / 2))
        );
        assert_eq!("4096".parse::<ByteSize>(), Ok(ByteSize(4096)));
        assert_eq!(" 2 KiB ".parse::<ByteSize>(), Ok(ByteSize(2048)));
    }

    #[test]
    fn bad_sizes_say_why() {
        assert!(matches!(
            "10 parsecs".parse::<ByteSize>(),
            Err(ParseError::UnknownUnit { .. })
        ));
        assert_eq!("".parse::<ByteSize>(), Err(ParseError::Empty));
        assert!(matches!(
            "-1GiB".parse::<ByteSize>(),
            Err(ParseError::Negative(_))
        ));
        assert!(matches!(
            "MiB".parse::<ByteSize>(),
            Err(ParseError::NotANumber(_))
        ));
        assert!(matches!(
            "99999999PiB".parse::<ByteSize>(),
            Err(ParseError::Overflow(_))
        ));
    }

    #[test]
    fn rates_need_per_second() {
        assert_eq!(
            "200MiB/s".parse::<Rate>(),
            Ok(Rate(200.0 * 1024.0 * 1024.0))
        );
        assert!(matches!(
            "200MiB".parse::<Rate>(),
            Err(ParseError::NotARate(_))
        ));
    }

    #[test]
    fn durations_sum_their_parts() {
        let d = |s: &str| s.parse::<HumanDuration>().map(HumanDuration::get);
        assert_eq!(d("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(d("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(d("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(d("0s"), Ok(Duration::ZERO));
        assert!(d("5 fortnights").is_err());
        assert!(d("h").is_err());
    }

    #[test]
    fn display_round_trips() {
        for s in ["10MiB", "1.5GiB", "512B", "3TiB"] {
            let v: ByteSize = s.parse().expect("parses");
            assert_eq!(v.to_string(), s);
        }
        assert_eq!(Rate(1024.0 * 1024.0 * 200.0).to_string(), "200MiB/s");
        assert_eq!(
            HumanDuration(Duration::from_secs(5400)).to_string(),
            "1h30m"
        );
    }

    #[test]
    fn deserializes_from_strings_and_integers() {
        #[derive(Deserialize)]
        struct T {
            a: ByteSize,
            b: ByteSize,
            c: Rate,
            d: HumanDuration,
        }
        let t: T = toml::from_str("a = \"1KiB\"\nb = 7\nc = \"1MB/s\"\nd = 60\n").expect("parses");
        assert_eq!(t.a, ByteSize(1024));
        assert_eq!(t.b, ByteSize(7));
        assert!((t.c.0 - 1e6).abs() < 1e-6);
        assert_eq!(t.d.0, Duration::from_secs(60));
        let err = toml::from_str::<T>("a = \"1 furlong\"\nb = 7\nc = \"1MB/s\"\nd = 60\n")
            .err()
            .expect("rejects");
        assert!(err.to_string().contains("furlong"), "{err}");
    }
}
