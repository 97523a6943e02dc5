//! Numbers as R prints them, so a table or a model summary reads like R's
//! console: [`format_real`] is R's `format()` of a numeric vector (the
//! fewest significant digits, up to `digits`, that show every element to
//! `digits`; fixed notation unless scientific is narrower), [`format_g`] is
//! `formatC(x, digits = d)` (C's `%g`), and [`format_pval`] is
//! `format.pval`, which prints p-values below the machine epsilon as
//! `< 2.2e-16` (or `< 2e-16` with fewer digits).

/// R's `.Machine$double.eps`: p-values below it print as `< 2.2e-16`.
pub const P_VALUE_EPSILON: f64 = f64::EPSILON;

/// The most significant digits R shows (`options(digits = 22)` is R's limit;
/// beyond 17 a double has nothing more to show).
const MAX_DIGITS: usize = 17;

/// One value's scientific decomposition to `digits` significant digits.
struct Decomposed {
    negative: bool,
    /// The power of ten of the first significant digit (after rounding).
    power: i32,
    /// Significant digits left once trailing zeros are dropped (at least 1).
    significant: i32,
}

fn decompose(x: f64, digits: usize) -> Decomposed {
    if x == 0.0 {
        return Decomposed {
            negative: false,
            power: 0,
            significant: 1,
        };
    }
    // Rust's `{:e}` rounds the decimal expansion correctly, as glibc's printf does.
    let text = format!("{:.*e}", digits - 1, x.abs());
    let (mantissa, exponent) = text.split_once('e').expect("`{:e}` has an exponent");
    let power: i32 = exponent.parse().expect("an integer exponent");
    let mantissa_digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = mantissa_digits.trim_end_matches('0').len().max(1) as i32;
    Decomposed {
        negative: x < 0.0,
        power,
        significant,
    }
}

/// How R lays out a numeric vector: fixed with `decimals` decimals, or
/// scientific with `decimals` decimals in the mantissa.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    scientific: bool,
    decimals: usize,
    /// Three-digit exponents (R widens them when any |exponent| >= 100).
    wide_exponent: bool,
}

/// R's `formatReal`: one layout for all finite values of a vector.
fn layout(values: &[f64], digits: usize) -> Layout {
    let digits = digits.clamp(1, MAX_DIGITS);
    let (mut negative, mut max_left, mut right, mut max_significant) = (false, i32::MIN, 0, 1);
    let (mut max_power, mut min_power) = (i32::MIN, i32::MAX);
    let mut any = false;
    for &x in values.iter().filter(|x| x.is_finite()) {
        any = true;
        let d = decompose(x, digits);
        negative |= d.negative;
        let left = d.power + 1;
        let signed_left = i32::from(d.negative) + left.max(1);
        right = right.max(d.significant - left);
        max_left = max_left.max(signed_left);
        max_significant = max_significant.max(d.significant);
        max_power = max_power.max(d.power);
        min_power = min_power.min(d.power);
    }
    if !any {
        return Layout {
            scientific: false,
            decimals: 0,
            wide_exponent: false,
        };
    }
    let right = right.max(0);
    let fixed_width = max_left + right + i32::from(right != 0);
    let wide_exponent = max_power >= 100 || min_power <= -99;
    let mantissa_decimals = max_significant - 1;
    let scientific_width = i32::from(negative)
        + i32::from(mantissa_decimals > 0)
        + mantissa_decimals
        + 4
        + i32::from(wide_exponent)
        + 1;
    if fixed_width <= scientific_width {
        Layout {
            scientific: false,
            decimals: right as usize,
            wide_exponent,
        }
    } else {
        Layout {
            scientific: true,
            decimals: mantissa_decimals as usize,
            wide_exponent,
        }
    }
}

fn write(x: f64, layout: Layout) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Inf".into() } else { "-Inf".into() };
    }
    if layout.scientific {
        scientific(x, layout.decimals, if layout.wide_exponent { 3 } else { 2 })
    } else {
        format!("{x:.*}", layout.decimals)
    }
}

/// `x` in C's `%.{decimals}e` form: `1.5e+08`, `-2.25e-12`.
fn scientific(x: f64, decimals: usize, exponent_digits: usize) -> String {
    let text = format!("{x:.decimals$e}");
    let (mantissa, exponent) = text.split_once('e').expect("`{:e}` has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    let sign = if exponent < 0 { '-' } else { '+' };
    format!(
        "{mantissa}e{sign}{:0exponent_digits$}",
        exponent.unsigned_abs()
    )
}

/// R's `format(values, digits = digits)`: every element in one layout,
/// right-justified to a common width.
pub fn format_real(values: &[f64], digits: usize) -> Vec<String> {
    let layout = layout(values, digits);
    let texts: Vec<String> = values.iter().map(|&x| write(x, layout)).collect();
    let width = texts.iter().map(String::len).max().unwrap_or(0);
    texts.into_iter().map(|t| format!("{t:>width$}")).collect()
}

/// One value as R's `format(x, digits = digits)` prints it: `0.07456734`,
/// `773.53`, `1.234568e+08`, `NaN`, `Inf`.
pub fn format_number(x: f64, digits: usize) -> String {
    write(x, layout(&[x], digits))
}

/// R's `formatC(x, digits = digits)`: C's `%.{digits}g`, right-aligned in
/// `digits + 1` characters as R does, e.g. `0.4875`, `275.2`, `  438`,
/// `1.235e+04`.
pub fn format_g(x: f64, digits: usize) -> String {
    let text = format_g_unpadded(x, digits);
    format!("{text:>width$}", width = digits.max(1) + 1)
}

fn format_g_unpadded(x: f64, digits: usize) -> String {
    if !x.is_finite() {
        return write(x, layout(&[], digits));
    }
    let precision = digits.max(1);
    if x == 0.0 {
        return "0".into();
    }
    let text = format!("{x:.*e}", precision - 1);
    let exponent: i32 = text
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .expect("`{:e}` has an exponent");
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if exponent < -4 || exponent >= precision as i32 {
        let text = scientific(x, precision - 1, 2);
        let (mantissa, exponent) = text.split_once('e').expect("an exponent");
        format!("{}e{exponent}", trim(mantissa.to_string()))
    } else {
        let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
        trim(format!("{x:.decimals$}"))
    }
}

/// R's `format.pval(p, digits = digits)`: `< 2.2e-16` (digits 4) or
/// `< 2e-16` (digits 3) below the machine epsilon, else `format(p, digits)`.
pub fn format_pval(p: f64, digits: usize) -> String {
    if p < P_VALUE_EPSILON {
        format!(
            "< {}",
            format_number(P_VALUE_EPSILON, digits.saturating_sub(2).max(1))
        )
    } else {
        format_number(p, digits)
    }
}

/// R's significance stars (`symnum` with cutpoints 0, .001, .01, .05, .1, 1).
pub fn significance_stars(p: f64) -> &'static str {
    match p {
        p if p.is_nan() => "",
        p if p <= 0.001 => "***",
        p if p <= 0.01 => "**",
        p if p <= 0.05 => "*",
        p if p <= 0.1 => ".",
        _ => " ",
    }
}

/// The legend R prints under a coefficient table with stars.
pub const SIGNIFICANCE_LEGEND: &str = "Signif. codes:  0 \u{2018}***\u{2019} 0.001 \u{2018}**\u{2019} 0.01 \u{2018}*\u{2019} 0.05 \u{2018}.\u{2019} 0.1 \u{2018} \u{2019} 1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_values_print_as_r_prints_them() {
        // print(x) in R 4.2.2 with options(digits = 7).
        assert_eq!(format_number(-7.609386123, 7), "-7.609386");
        assert_eq!(format_number(0.0745673412, 7), "0.07456734");
        assert_eq!(format_number(773.53, 5), "773.53");
        assert_eq!(format_number(123456789.0, 7), "123456789");
        assert_eq!(format_number(1234567891234.0, 7), "1.234568e+12");
        assert_eq!(format_number(1e-10, 7), "1e-10");
        assert_eq!(format_number(0.0001234, 7), "0.0001234");
        assert_eq!(format_number(2.0, 7), "2");
        assert_eq!(format_number(0.0, 7), "0");
        assert_eq!(format_number(1e300, 7), "1e+300");
        assert_eq!(format_number(f64::NAN, 7), "NaN");
        assert_eq!(format_number(f64::NEG_INFINITY, 7), "-Inf");
        assert_eq!(format_number(2.220446049250313e-16, 2), "2.2e-16");
    }

    #[test]
    fn vectors_share_one_layout() {
        // format(c(967.3148, 765.5337), digits = 5) and format(c(871, 868)).
        assert_eq!(format_real(&[967.3148, 765.5337], 5), ["967.31", "765.53"]);
        assert_eq!(format_real(&[1000.0, 765.5337], 5), ["1000.00", " 765.53"]);
        assert_eq!(format_real(&[99.0, 100.0], 7), [" 99", "100"]);
    }

    #[test]
    fn c_g_format_and_p_values() {
        assert_eq!(format_g(0.48751234, 4), "0.4875");
        assert_eq!(format_g(275.2213, 4), "275.2");
        assert_eq!(format_g(12345.6, 4), "1.235e+04");
        assert_eq!(format_g(0.00001234, 4), "1.234e-05");
        // formatC(c(3, 437.99, -3, 0), digits = 4) in R 4.2.2.
        assert_eq!(format_g(3.0, 4), "    3");
        assert_eq!(format_g(437.99, 4), "  438");
        assert_eq!(format_g(-3.0, 4), "   -3");
        assert_eq!(format_g(0.0, 4), "    0");
        assert_eq!(format_g(-0.0123, 4), "-0.0123");
        assert_eq!(format_g(12000.0, 4), "1.2e+04");
        assert_eq!(format_pval(1e-300, 4), "< 2.2e-16");
        assert_eq!(format_pval(1e-300, 3), "< 2e-16");
        assert_eq!(format_pval(0.003162, 4), "0.003162");
        assert_eq!(format_pval(2.853e-9, 3), "2.85e-09");
    }

    #[test]
    fn stars_follow_r_cutpoints() {
        let stars: Vec<&str> = [0.0, 0.001, 0.005, 0.03, 0.07, 0.5]
            .into_iter()
            .map(significance_stars)
            .collect();
        assert_eq!(stars, ["***", "***", "**", "*", ".", " "]);
    }
}
