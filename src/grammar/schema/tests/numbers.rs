//! Unit tests for the rules of the keyword table on numbers: integer bounds of at most 18
//! digits (longer ones refused, naming the keyword), and bounded non-integers of at most 15
//! significant digits, leading zeros not counted.

use serde_json::json;

use crate::schema::compile_schema;
use super::{assert_accepts, assert_rejects, schema};

#[test]
fn integer_bounds_past_eighteen_digits_are_refused_naming_the_keyword() {
    let cases = [
        ("maximum", json!(9_223_372_036_854_775_807u64)),
        ("minimum", json!(-10_000_000_000_000_000_000.0)),
        ("exclusiveMinimum", json!(1e19)),
        ("exclusiveMaximum", json!(-1_234_567_890_123_456_789i64)),
    ];
    for (keyword, bound) in cases {
        let value = json!({"type": "object", "properties": {"n": {"type": "integer", keyword: bound}}});
        let error = compile_schema(&value).map(|_| ()).expect_err("a 19-digit bound compiles");
        assert_eq!((error.keyword.as_str(), error.location.as_str()), (keyword, "properties.n"), "{error}");
        assert!(error.message.contains("18 digits"), "{error}");
    }
    // A whole multipleOf makes a number an integer: the same rule.
    let stepped = compile_schema(&json!({"type": "number", "multipleOf": 5, "maximum": 1e20}));
    assert_eq!(stepped.map(|_| ()).expect_err("refused").keyword, "maximum");
    // Eighteen digits are exact, and a long bound that a tighter one replaces is harmless.
    let widest = schema(json!({"type": "integer", "minimum": -999_999_999_999_999_999i64, "maximum": 999_999_999_999_999_999i64}));
    assert_accepts(&widest, &["-999999999999999999", "0", "999999999999999999"]);
    assert_rejects(&widest, &["1000000000000000000", "-1000000000000000000"]);
    let tightened = schema(json!({"type": "integer", "allOf": [{"maximum": 1e19}, {"maximum": 10}]}));
    assert_accepts(&tightened, &["10", "-3"]);
    assert_rejects(&tightened, &["11"]);
}

#[test]
fn bounded_non_integers_count_significant_digits_not_leading_zeros() {
    // 0.000123456789012 has 12 significant digits: the bound itself can be written.
    let small = schema(json!({"type": "number", "minimum": 0.000123456789012, "maximum": 1}));
    assert_accepts(&small, &["0.000123456789012", "0.000123456789013", "0.00012345678901234", "0.5", "1"]);
    assert_rejects(&small, &["0.000123456789011", "0.0001234567890119", "1.0000000000001"]);
    // Fifteen significant digits, after up to fifteen leading zeros.
    let unit = schema(json!({"type": "number", "exclusiveMinimum": 0, "maximum": 1}));
    assert_accepts(
        &unit,
        &["0.123456789012345", "0.000000000000001", "0.000000000000000123456789012345", "0.5"],
    );
    assert_rejects(&unit, &["0.1234567890123456", "0.00000000000000001", "0", "1.5"]);
    assert_accepts(&schema(json!({"type": "number", "minimum": 10, "maximum": 100})), &["12.3456789012345"]);
    assert_rejects(&schema(json!({"type": "number", "minimum": 10, "maximum": 100})), &["12.34567890123456"]);
    // Bounds smaller than fifteen leading zeros allow: as many as they have.
    let tiny = schema(json!({"type": "number", "minimum": 1e-20, "maximum": 2e-20}));
    assert_accepts(&tiny, &["0.00000000000000000001", "0.000000000000000000015", "0.00000000000000000002"]);
    assert_rejects(&tiny, &["0.000000000000000000025", "0.000000000000000000009"]);
    // A power-of-ten step still caps the digits after the point.
    let cents = schema(json!({"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.01}));
    assert_accepts(&cents, &["0.05", "9.99"]);
    assert_rejects(&cents, &["0.005"]);
}
