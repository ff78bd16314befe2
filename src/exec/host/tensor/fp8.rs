//! fp8 elements of host tensors (`float8_e4m3fn`, `float8_e5m2`: the
//! operands of `aten._scaled_mm`), stored as their bits. Values convert as
//! c10's `Float8_e4m3fn` / `Float8_e5m2` convert them: exactly to wider
//! types; from a value, through `f32`, to the nearest representable one,
//! ties to an even mantissa, with e4m3fn's overflow (beyond 464, halfway past
//! its largest 448) becoming NaN and e5m2's (from 61440, halfway past 57344)
//! infinity. Comparisons are by value (NaN unordered, `-0 == 0`).

/// An fp8 format: its bits' layout and its largest code.
trait Format {
    /// Mantissa bits.
    const MANTISSA: u32;
    /// Exponent bias.
    const BIAS: i32;
    /// The code rounding saturates at (NaN for e4m3fn, infinity for e5m2),
    /// taken as the next value past the largest finite one while rounding.
    const OVERFLOW: u8;
    /// The value of a non-negative code below [`Format::OVERFLOW`], or of
    /// `OVERFLOW` as the value rounding treats it as.
    fn magnitude(code: u8) -> f64 {
        let m = u32::from(code) & ((1 << Self::MANTISSA) - 1);
        let e = i32::from(code >> Self::MANTISSA);
        let frac = f64::from(m) / f64::from(1u32 << Self::MANTISSA);
        if e == 0 {
            frac * 2f64.powi(1 - Self::BIAS)
        } else {
            (1.0 + frac) * 2f64.powi(e - Self::BIAS)
        }
    }
    /// The code of `v` (see the module documentation).
    fn encode(v: f64) -> u8 {
        let v = f64::from(v as f32);
        let sign = if v.is_sign_negative() { 0x80 } else { 0 };
        let a = v.abs();
        if a.is_nan() {
            return sign | 0x7f;
        }
        // The largest code whose magnitude is at most `a`, then the nearer of
        // it and the next (ties to the even code: an even mantissa).
        let mut lo = 0u8;
        while lo < Self::OVERFLOW && Self::magnitude(lo + 1) <= a {
            lo += 1;
        }
        if lo == Self::OVERFLOW {
            return sign | Self::OVERFLOW;
        }
        let (below, above) = (a - Self::magnitude(lo), Self::magnitude(lo + 1) - a);
        let code = if below < above || (below == above && lo % 2 == 0) {
            lo
        } else {
            lo + 1
        };
        sign | code
    }
}

/// `float8_e4m3fn`: 4 exponent bits (bias 7), 3 mantissa bits, no
/// infinities, NaN `0x7f` / `0xff`.
struct E4m3fn;

impl Format for E4m3fn {
    const MANTISSA: u32 = 3;
    const BIAS: i32 = 7;
    const OVERFLOW: u8 = 0x7f;
}

/// `float8_e5m2`: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like
/// infinities and NaNs.
struct E5m2;

impl Format for E5m2 {
    const MANTISSA: u32 = 2;
    const BIAS: i32 = 15;
    const OVERFLOW: u8 = 0x7c;
}

macro_rules! fp8 {
    ($(#[$doc:meta])* $name:ident, $format:ty, $special:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl $name {
            /// The value.
            pub fn to_f64(self) -> f64 {
                let sign = if self.0 & 0x80 != 0 { -1.0 } else { 1.0 };
                let code = self.0 & 0x7f;
                let special: fn(u8) -> Option<f64> = $special;
                sign * special(code).unwrap_or_else(|| <$format>::magnitude(code))
            }

            /// The nearest fp8 value (see the module documentation).
            pub fn from_f64(v: f64) -> Self {
                $name(<$format>::encode(v))
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.to_f64() == other.to_f64()
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                self.to_f64().partial_cmp(&other.to_f64())
            }
        }
    };
}

fp8!(
    /// A `float8_e4m3fn` value, as its bits.
    F8E4m3fn,
    E4m3fn,
    |code| (code == 0x7f).then_some(f64::NAN)
);

fp8!(
    /// A `float8_e5m2` value, as its bits.
    F8E5m2,
    E5m2,
    |code| match code {
        0x7c => Some(f64::INFINITY),
        0x7d..=0x7f => Some(f64::NAN),
        _ => None,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_rounding_are_c10s() {
        // Decoding: 1, 2, -1.5, the largest and smallest values, NaN.
        assert_eq!(F8E4m3fn(0x38).to_f64(), 1.0);
        assert_eq!(F8E4m3fn(0x40).to_f64(), 2.0);
        assert_eq!(F8E4m3fn(0xbc).to_f64(), -1.5);
        assert_eq!(F8E4m3fn(0x7e).to_f64(), 448.0);
        assert_eq!(F8E4m3fn(0x01).to_f64(), 2f64.powi(-9));
        assert!(F8E4m3fn(0x7f).to_f64().is_nan() && F8E4m3fn(0xff).to_f64().is_nan());
        assert_eq!(F8E5m2(0x3c).to_f64(), 1.0);
        assert_eq!(F8E5m2(0x7b).to_f64(), 57344.0);
        assert_eq!(F8E5m2(0x01).to_f64(), 2f64.powi(-16));
        assert_eq!(F8E5m2(0xfc).to_f64(), f64::NEG_INFINITY);
        assert!(F8E5m2(0x7e).to_f64().is_nan());
        // Every finite code encodes back to itself.
        for b in 0..=255u8 {
            let (x, y) = (F8E4m3fn(b), F8E5m2(b));
            if !x.to_f64().is_nan() {
                assert_eq!(F8E4m3fn::from_f64(x.to_f64()).0, b, "e4m3fn {b:#x}");
            }
            if y.to_f64().is_finite() {
                assert_eq!(F8E5m2::from_f64(y.to_f64()).0, b, "e5m2 {b:#x}");
            }
        }
        // Ties to even: 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39).
        assert_eq!(F8E4m3fn::from_f64(1.0625).0, 0x38);
        assert_eq!(F8E4m3fn::from_f64(1.1875).0, 0x3a);
        // Overflow: e4m3fn to NaN beyond 464, e5m2 to infinity from 61440.
        assert_eq!(F8E4m3fn::from_f64(464.0).0, 0x7e);
        assert_eq!(F8E4m3fn::from_f64(465.0).0, 0x7f);
        assert_eq!(F8E4m3fn::from_f64(-1e9).0, 0xff);
        assert_eq!(F8E5m2::from_f64(61439.0).0, 0x7b);
        assert_eq!(F8E5m2::from_f64(61440.0).0, 0x7c);
        assert_eq!(F8E5m2::from_f64(f64::NEG_INFINITY).0, 0xfc);
        // By value: -0 == 0, NaN unordered.
        assert_eq!(F8E4m3fn(0x80), F8E4m3fn(0x00));
        assert_ne!(F8E4m3fn(0x7f), F8E4m3fn(0x7f));
    }
}
