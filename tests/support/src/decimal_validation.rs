//! Validation errors of a document, as the grammar would judge it: the `jsonschema` crate
//! decides `multipleOf` in binary floating point (2.22 is no multiple of 0.01 there), the
//! grammar in decimal, so such errors are kept only when the decimal check agrees. Shared by
//! the tests that validate generated documents against the spec's order schema.
//! Cost: one validation pass, plus a decimal check per `multipleOf` error.

use jsonschema::error::ValidationErrorKind;
use jsonschema::Validator;
use llamay_grammar::schema::is_decimal_multiple;
use serde_json::Value;

/// Every error `validator` finds in `document`, less `multipleOf` errors on values that are
/// multiples in decimal.
pub fn errors_in_decimal(validator: &Validator, document: &Value) -> Vec<String> {
    validator
        .iter_errors(document)
        .filter(|error| {
            !matches!(&error.kind, ValidationErrorKind::MultipleOf { multiple_of }
                if is_decimal_multiple(&error.instance, *multiple_of))
        })
        .map(|error| error.to_string())
        .collect()
}
