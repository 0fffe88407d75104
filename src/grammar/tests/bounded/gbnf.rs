//! GBNF grammars nested or chained far past the limits.

use super::on_small_stack;
use crate::gbnf::compile_gbnf;
use crate::{GrammarError, Limits, Location};

fn compiled(source: String) -> Result<(), GrammarError> {
    on_small_stack(move || compile_gbnf(source.as_bytes(), &Limits::default()).map(|_| ()))
}

#[test]
fn parentheses_nested_past_the_limit_are_refused_at_the_one_that_goes_past() {
    let limit = Limits::default().max_nesting;
    for depth in [limit + 1, 10_000, 400_000] {
        let source = format!("root ::= \"a\" |\n  {}\"b\"{}\n", "(".repeat(depth), ")".repeat(depth));
        let error = compiled(source).expect_err("deep parentheses compile");
        assert!(
            matches!(&error, GrammarError::TooDeep { at, .. } if *at == Location::at(2, 3 + limit)),
            "{error}"
        );
        assert!(error.to_string().contains(&format!("{limit}")), "{error}");
    }
    compiled(format!("root ::= {}\"b\"{}\n", "(".repeat(limit), ")".repeat(limit))).expect("at the limit");
}

#[test]
fn long_chains_of_rules_compile_or_are_refused_in_bounded_stack() {
    // Each rule calls the next before a byte: the start needs 40,000 open rules.
    let mut called_first = String::from("root ::= r0\n");
    for index in 0..40_000 {
        called_first.push_str(&format!("r{index} ::= r{} \"x\"\n", index + 1));
    }
    called_first.push_str("r40000 ::= \"y\"\n");
    let error = compiled(called_first).expect_err("40,000 open rules at the start");
    assert!(error.to_string().contains("1024 open rules"), "{error}");
    // Called last, each rule returns straight to the one below: any length compiles.
    let mut called_last = String::from("root ::= r0\n");
    for index in 0..40_000 {
        called_last.push_str(&format!("r{index} ::= \"x\" r{}\n", index + 1));
    }
    called_last.push_str("r40000 ::= \"y\"\n");
    compiled(called_last).expect("a tail-called chain");
}
