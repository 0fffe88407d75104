//! Numbers with bounds and steps, compiled to digit automata.
//!
//! A bounded value is written as plain decimal digits (no exponent), and the automaton walks
//! them the way one compares numbers by hand: per length of the integer part, a state is the
//! position plus whether the digits so far equal the lower (upper) bound's, so "integer in
//! [lo, hi]" costs about four states per digit. A step on integers adds the value modulo the
//! step to the state. Non-integer bounds are compared exactly in decimal; to keep that exact
//! for validators that compare as binary floats, such a number carries at most 15 significant
//! digits (leading zeros do not count: `0.000123456789012` has 12), after at most 15 leading
//! zeros in its fraction, or as many as a bound has.
//! The automata of all lengths form one NFA whose minimal DFA becomes the rules: as a choice
//! between lengths, every digit read would keep one parse stack per length still possible.
//!
//! Key type: [`NumberSpec`]. Cost: O(digits x 4 x step) rules, capped by [`MAX_NUMBER_RULES`].

use std::collections::HashMap;

use serde_json::Value;

use super::json::{byte, RuleSink};
use super::minimize::SmallNfa;
use crate::ir::{ByteSet, RuleId, Symbol};

/// Integers are exact up to this many digits; a bound with more is refused.
pub const MAX_INTEGER_DIGITS: usize = 18;
/// Significant digits a bounded non-integer may carry (and integer digits of any number
/// written without an exponent).
pub const MAX_DECIMAL_DIGITS: usize = 15;
/// At most this many multiples are listed as literals instead of an automaton.
const ENUMERATE_LIMIT: u128 = 64;
/// Rules one number may cost before it is refused.
pub const MAX_NUMBER_RULES: usize = 20_000;

/// An exact decimal: sign, integer digits without leading zeros (`[0]` for zero) and fraction
/// digits without trailing zeros.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Decimal {
    pub negative: bool,
    pub int: Vec<u8>,
    pub frac: Vec<u8>,
}

impl Decimal {
    /// The exact decimal a JSON number denotes (binary floats through their shortest form).
    pub fn from_json(value: &Value) -> Option<Decimal> {
        let number = value.as_number()?;
        let text = if let Some(i) = number.as_i64() {
            i.to_string()
        } else if let Some(u) = number.as_u64() {
            u.to_string()
        } else {
            let f = number.as_f64()?;
            if !f.is_finite() {
                return None;
            }
            format!("{f}")
        };
        Decimal::parse(&text)
    }

    pub fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int_text, frac_text) = rest.split_once('.').unwrap_or((rest, ""));
        if int_text.is_empty() || !int_text.bytes().all(|b| b.is_ascii_digit()) || !frac_text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut int: Vec<u8> = int_text.bytes().map(|b| b - b'0').skip_while(|d| *d == 0).collect();
        if int.is_empty() {
            int.push(0);
        }
        let mut frac: Vec<u8> = frac_text.bytes().map(|b| b - b'0').collect();
        while frac.last() == Some(&0) {
            frac.pop();
        }
        let is_zero = int == [0] && frac.is_empty();
        Some(Decimal { negative: negative && !is_zero, int, frac })
    }

    /// Whether this is a whole multiple of `step`; `None` when `step` is zero or the two,
    /// written over their common scale, do not fit 128 bits.
    pub fn is_multiple_of(&self, step: &Decimal) -> Option<bool> {
        let scale = self.frac.len().max(step.frac.len());
        let scaled = |d: &Decimal| -> Option<u128> {
            d.int
                .iter()
                .chain(&d.frac)
                .chain(std::iter::repeat_n(&0, scale - d.frac.len()))
                .try_fold(0u128, |acc, digit| acc.checked_mul(10)?.checked_add(u128::from(*digit)))
        };
        let (value, step) = (scaled(self)?, scaled(step)?);
        (step > 0).then(|| value % step == 0)
    }

    pub fn is_integer(&self) -> bool {
        self.frac.is_empty()
    }

    /// The integer part as i128, saturating far beyond the 18-digit range.
    fn int_value(&self) -> i128 {
        let mut value: i128 = 0;
        for d in &self.int {
            value = value.saturating_mul(10).saturating_add(*d as i128);
            if value > 10i128.pow(30) {
                break;
            }
        }
        if self.negative { -value } else { value }
    }

    /// The smallest integer >= self (or > self when `exclusive`).
    pub fn ceil_int(&self, exclusive: bool) -> i128 {
        let truncated = self.int_value();
        if self.frac.is_empty() {
            if exclusive { truncated + 1 } else { truncated }
        } else if self.negative {
            truncated
        } else {
            truncated + 1
        }
    }

    /// The largest integer <= self (or < self when `exclusive`).
    pub fn floor_int(&self, exclusive: bool) -> i128 {
        let truncated = self.int_value();
        if self.frac.is_empty() {
            if exclusive { truncated - 1 } else { truncated }
        } else if self.negative {
            truncated - 1
        } else {
            truncated
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bound {
    pub value: Decimal,
    pub exclusive: bool,
}

/// What a number must satisfy. `step` is a whole step (integers only); `fraction_digits`
/// caps the digits after the point (a power-of-ten step, or 0 for integers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NumberSpec {
    pub integer: bool,
    pub lower: Option<Bound>,
    pub upper: Option<Bound>,
    pub step: Option<u64>,
    pub fraction_digits: Option<usize>,
}

/// Why a number constraint cannot be compiled, and the keyword to blame.
#[derive(Debug)]
pub struct NumberTooComplex {
    pub keyword: &'static str,
    pub message: String,
}

fn too_complex(keyword: &'static str, message: impl Into<String>) -> NumberTooComplex {
    NumberTooComplex { keyword, message: message.into() }
}

/// Compiles `spec`; `Ok(None)` when no number satisfies it.
pub fn number_rule(sink: &mut RuleSink, spec: &NumberSpec) -> Result<Option<RuleId>, NumberTooComplex> {
    let whole = spec.integer || spec.step.is_some() || spec.fraction_digits == Some(0);
    if whole {
        integer_rule(sink, spec)
    } else {
        decimal_rule(sink, spec)
    }
}

/// The keyword that sets a bound: a lower or upper one, inclusive or exclusive.
fn bound_keyword(is_lower: bool, bound: &Bound) -> &'static str {
    match (is_lower, bound.exclusive) {
        (true, false) => "minimum",
        (true, true) => "exclusiveMinimum",
        (false, false) => "maximum",
        (false, true) => "exclusiveMaximum",
    }
}

fn integer_rule(sink: &mut RuleSink, spec: &NumberSpec) -> Result<Option<RuleId>, NumberTooComplex> {
    // Integers are written exactly up to 18 digits; a longer bound is refused rather than
    // quietly clamped (which would refuse valid values the schema allows).
    for (is_lower, bound) in [(true, &spec.lower), (false, &spec.upper)] {
        let Some(bound) = bound else { continue };
        if bound.value.int.len() > MAX_INTEGER_DIGITS {
            return Err(too_complex(
                bound_keyword(is_lower, bound),
                format!(
                    "its bound has {} integer digits, and integers are enforced exactly up to {MAX_INTEGER_DIGITS} digits; \
                     write a bound of at most {MAX_INTEGER_DIGITS} digits (999999999999999999 at most)",
                    bound.value.int.len()
                ),
            ));
        }
    }
    let limit = 10i128.pow(MAX_INTEGER_DIGITS as u32) - 1;
    let step = spec.step.unwrap_or(1).max(1) as u128;
    if spec.lower.is_none() && spec.upper.is_none() {
        if step == 1 {
            return Ok(Some(sink.any_integer()));
        }
        return unbounded_multiples(sink, step).map(Some);
    }
    if spec.lower.as_ref().is_some_and(|b| b.value.ceil_int(b.exclusive) > limit) {
        return Err(too_complex("minimum", format!("it is above the largest integer llamay writes exactly ({MAX_INTEGER_DIGITS} digits)")));
    }
    if spec.upper.as_ref().is_some_and(|b| b.value.floor_int(b.exclusive) < -limit) {
        return Err(too_complex("maximum", format!("it is below the smallest integer llamay writes exactly ({MAX_INTEGER_DIGITS} digits)")));
    }
    let lo = spec.lower.as_ref().map_or(-limit, |b| b.value.ceil_int(b.exclusive).max(-limit));
    let hi = spec.upper.as_ref().map_or(limit, |b| b.value.floor_int(b.exclusive).min(limit));
    if lo > hi {
        return Ok(None);
    }
    // `minimum: 0` (or up to one step) and no maximum: every non-negative multiple, of any
    // length, by the compact modulo automaton.
    if spec.upper.is_none() && step > 1 && (0..=step as i128).contains(&lo) {
        return multiple_magnitudes(sink, step, lo == 0).map(Some);
    }
    let mut alternatives = Vec::new();
    let mut digits = DigitAutomaton::new(step);
    if hi >= 0 {
        if let Some(rule) = digits.magnitudes(sink, lo.max(0) as u128, hi as u128)? {
            alternatives.push(vec![Symbol::Rule(rule)]);
        }
    }
    if lo < 0 {
        if let Some(rule) = digits.magnitudes(sink, (-hi).max(1) as u128, (-lo) as u128)? {
            alternatives.push(vec![byte(b'-'), Symbol::Rule(rule)]);
        }
    }
    if alternatives.is_empty() {
        return Ok(None);
    }
    Ok(Some(sink.add("integer-range", alternatives)))
}

/// Multiples of `step` without bounds: the value modulo `step` is the state.
fn unbounded_multiples(sink: &mut RuleSink, step: u128) -> Result<RuleId, NumberTooComplex> {
    let with_zero = multiple_magnitudes(sink, step, true)?;
    let positive = multiple_magnitudes(sink, step, false)?;
    Ok(sink.add("multiple", vec![vec![Symbol::Rule(with_zero)], vec![byte(b'-'), Symbol::Rule(positive)]]))
}

/// Non-negative multiples of `step` of any length (`0` itself only when `include_zero`).
fn multiple_magnitudes(sink: &mut RuleSink, step: u128, include_zero: bool) -> Result<RuleId, NumberTooComplex> {
    if step > 1000 {
        return Err(too_complex(
            "multipleOf",
            format!("a step of {step} without an upper bound needs more states than allowed; add maximum"),
        ));
    }
    let states: Vec<RuleId> = (0..step).map(|r| sink.builder.declare(format!("mod-{step}-{r}"))).collect();
    let transitions = |residue: u128, first_digit: u128| {
        let mut by_next: Vec<ByteSet> = vec![ByteSet::EMPTY; step as usize];
        for d in first_digit..10u128 {
            by_next[((residue * 10 + d) % step) as usize].insert(b'0' + d as u8);
        }
        by_next
            .iter()
            .enumerate()
            .filter(|(_, set)| !set.is_empty())
            .map(|(next, set)| vec![Symbol::Bytes(*set), Symbol::Rule(states[next])])
            .collect::<Vec<_>>()
    };
    for residue in 0..step {
        let mut alternatives = transitions(residue, 0);
        if residue == 0 {
            alternatives.push(vec![]);
        }
        sink.builder.define(states[residue as usize], alternatives);
    }
    let mut magnitude = transitions(0, 1);
    if include_zero {
        magnitude.push(vec![byte(b'0')]);
    }
    Ok(sink.add("multiple-magnitude", magnitude))
}

fn digits_of(value: u128) -> Vec<u8> {
    value.to_string().bytes().map(|b| b - b'0').collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct IntState {
    length: usize,
    position: usize,
    tight_low: bool,
    tight_high: bool,
    residue: u128,
}

/// Builds "integer magnitude in [lo, hi], a multiple of step" automata: one chain of digit
/// states per length, joined into one NFA and lowered as its minimal DFA, so a digit read
/// leaves one parse stack, not one per length still possible.
struct DigitAutomaton {
    step: u128,
    memo: HashMap<IntState, Option<usize>>,
    nfa: SmallNfa,
    low: Vec<u8>,
    high: Vec<u8>,
    built: usize,
}

impl DigitAutomaton {
    fn new(step: u128) -> Self {
        DigitAutomaton { step, memo: HashMap::new(), nfa: SmallNfa::default(), low: Vec::new(), high: Vec::new(), built: 0 }
    }

    fn magnitudes(&mut self, sink: &mut RuleSink, lo: u128, hi: u128) -> Result<Option<RuleId>, NumberTooComplex> {
        if lo > hi {
            return Ok(None);
        }
        let step = self.step;
        let first_multiple = lo.div_ceil(step) * step;
        if first_multiple > hi {
            return Ok(None);
        }
        self.memo.clear();
        self.nfa = SmallNfa::default();
        let mut starts = Vec::new();
        if (hi - first_multiple) / step < ENUMERATE_LIMIT {
            // Few values: each a chain of its digits.
            for value in (0..).map(|i| first_multiple + i * step).take_while(|v| *v <= hi) {
                let mut next = self.nfa.node(true, Vec::new());
                for digit in value.to_string().bytes().rev() {
                    next = self.nfa.node(false, vec![(digit, next)]);
                }
                starts.push(next);
            }
        } else {
            let (lo_len, hi_len) = (digits_of(lo).len(), digits_of(hi).len());
            for length in lo_len..=hi_len {
                let band_low = if length == 1 { 0 } else { 10u128.pow(length as u32 - 1) };
                let band_high = 10u128.pow(length as u32) - 1;
                self.low = digits_of(lo.max(band_low));
                self.high = digits_of(hi.min(band_high));
                // States past both bounds depend only on the digits left and the residue, so
                // they are shared across lengths; tight ones depend on this band's bounds.
                self.memo.retain(|state, _| state.length == 0);
                let start = IntState { length, position: 0, tight_low: true, tight_high: true, residue: 0 };
                starts.extend(self.state(start)?);
            }
        }
        self.nfa
            .lower(sink, &starts, "integer-digit", MAX_NUMBER_RULES)
            .map_err(|_| too_complex("multipleOf", format!("a step of {} over these bounds needs more than {MAX_NUMBER_RULES} states", self.step)))
    }

    /// The NFA node of `state`; `None` when no digits from it reach an accepted value.
    fn state(&mut self, state: IntState) -> Result<Option<usize>, NumberTooComplex> {
        let key = if state.tight_low || state.tight_high {
            state
        } else {
            IntState { length: 0, position: state.length - state.position, tight_low: false, tight_high: false, residue: state.residue }
        };
        if let Some(found) = self.memo.get(&key) {
            return Ok(*found);
        }
        if state.position == state.length {
            let accepted = state.residue == 0;
            let node = accepted.then(|| self.nfa.node(true, Vec::new()));
            self.memo.insert(key, node);
            return Ok(node);
        }
        self.built += 1;
        if self.built > MAX_NUMBER_RULES {
            return Err(too_complex(
                "multipleOf",
                format!("a step of {} over these bounds needs more than {MAX_NUMBER_RULES} states", self.step),
            ));
        }
        let position = state.position;
        let min_digit = if state.tight_low { self.low[position] } else { 0 };
        let max_digit = if state.tight_high { self.high[position] } else { 9 };
        let mut edges = Vec::new();
        for digit in min_digit..=max_digit {
            let next = IntState {
                length: state.length,
                position: position + 1,
                tight_low: state.tight_low && digit == self.low[position],
                tight_high: state.tight_high && digit == self.high[position],
                residue: (state.residue * 10 + digit as u128) % self.step,
            };
            if let Some(node) = self.state(next)? {
                edges.push((b'0' + digit, node));
            }
        }
        let node = (!edges.is_empty()).then(|| self.nfa.node(false, edges));
        self.memo.insert(key, node);
        Ok(node)
    }
}

/// A magnitude bound for the decimal automaton: digits plus exclusivity.
#[derive(Clone)]
struct MagnitudeBound {
    int: Vec<u8>,
    frac: Vec<u8>,
    exclusive: bool,
}

impl MagnitudeBound {
    /// Zeros between the point and the first other digit when the integer part is 0.
    fn leading_fraction_zeros(&self) -> usize {
        if self.int != [0] {
            return 0;
        }
        self.frac.iter().take_while(|d| **d == 0).count()
    }
}

/// Where the decimal automaton is: in the integer part (`zero`: every digit so far is 0), or
/// in the fraction with `significant` digits written (those from the first digit that is not
/// a leading zero on: `0.00012` has two).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum DecimalState {
    Int { length: usize, position: usize, tight_low: bool, tight_high: bool, zero: bool },
    Frac { position: usize, significant: usize, tight_low: bool, tight_high: bool, after_point: bool },
}

/// Positions at and above `FREE - MAX_DECIMAL_DIGITS` mark the memo keys of free fraction
/// states (see [`DecimalAutomaton::memo_key`]); real positions never come near.
const FREE: usize = usize::MAX;

fn is_free(state: &DecimalState) -> bool {
    matches!(state, DecimalState::Frac { position, .. } if *position >= FREE - MAX_DECIMAL_DIGITS)
}

struct DecimalAutomaton {
    low: MagnitudeBound,
    high: Option<MagnitudeBound>,
    /// Most digits after the point (a power-of-ten `multipleOf`), if any.
    fraction_cap: usize,
    /// Most zeros between the point and the first significant digit: 15, or as many as a
    /// bound needs, so numbers as small as the bounds can be written.
    leading_zero_cap: usize,
    memo: HashMap<DecimalState, Option<usize>>,
    nfa: SmallNfa,
    low_digits: Vec<u8>,
    high_digits: Vec<u8>,
}

fn decimal_rule(sink: &mut RuleSink, spec: &NumberSpec) -> Result<Option<RuleId>, NumberTooComplex> {
    if spec.lower.is_none() && spec.upper.is_none() {
        let fraction_cap = spec.fraction_digits.unwrap_or(MAX_DECIMAL_DIGITS).min(MAX_DECIMAL_DIGITS);
        let integer = sink.any_integer();
        let digit = Symbol::Bytes(ByteSet::range(b'0', b'9'));
        let fraction = sink.bounded_list_sep("fraction-digits", vec![digit], vec![], 1, Some(fraction_cap as u64));
        return Ok(Some(sink.add(
            "decimal",
            vec![vec![Symbol::Rule(integer)], vec![Symbol::Rule(integer), byte(b'.'), Symbol::Rule(fraction)]],
        )));
    }
    let beyond = |b: &Bound| b.value.int.len() > MAX_DECIMAL_DIGITS;
    if spec.lower.as_ref().is_some_and(|b| !b.value.negative && beyond(b)) {
        return Err(too_complex("minimum", format!("it has more than {MAX_DECIMAL_DIGITS} integer digits, beyond what llamay writes exactly")));
    }
    if spec.upper.as_ref().is_some_and(|b| b.value.negative && beyond(b)) {
        return Err(too_complex("maximum", format!("it has more than {MAX_DECIMAL_DIGITS} integer digits, beyond what llamay writes exactly")));
    }
    let zero = MagnitudeBound { int: vec![0], frac: vec![], exclusive: false };
    let magnitude = |b: &Bound| MagnitudeBound { int: b.value.int.clone(), frac: b.value.frac.clone(), exclusive: b.exclusive };
    let mut alternatives = Vec::new();
    // Non-negative values.
    let upper_allows_nonnegative = spec.upper.as_ref().is_none_or(|b| !b.value.negative);
    if upper_allows_nonnegative {
        let low = match &spec.lower {
            Some(b) if !b.value.negative => magnitude(b),
            _ => zero.clone(),
        };
        let high = spec.upper.as_ref().map(magnitude);
        if let Some(rule) = DecimalAutomaton::build(sink, low, high, spec.fraction_digits)? {
            alternatives.push(vec![Symbol::Rule(rule)]);
        }
    }
    // Negative values, as magnitudes: the bounds swap sides.
    let lower_allows_negative = spec.lower.as_ref().is_none_or(|b| b.value.negative);
    if lower_allows_negative {
        let low = match &spec.upper {
            Some(b) if b.value.negative => magnitude(b),
            _ => MagnitudeBound { exclusive: true, ..zero.clone() },
        };
        let high = spec.lower.as_ref().map(magnitude);
        if let Some(rule) = DecimalAutomaton::build(sink, low, high, spec.fraction_digits)? {
            alternatives.push(vec![byte(b'-'), Symbol::Rule(rule)]);
        }
    }
    if alternatives.is_empty() {
        return Ok(None);
    }
    Ok(Some(sink.add("decimal-range", alternatives)))
}

impl DecimalAutomaton {
    fn build(
        sink: &mut RuleSink,
        low: MagnitudeBound,
        high: Option<MagnitudeBound>,
        fraction_digits: Option<usize>,
    ) -> Result<Option<RuleId>, NumberTooComplex> {
        let max_int_digits = MAX_DECIMAL_DIGITS;
        if low.int.len() > max_int_digits {
            return Ok(None);
        }
        // An upper bound past the digit cap constrains nothing we can write.
        let high = high.filter(|h| h.int.len() <= max_int_digits);
        let top_length = high.as_ref().map_or(max_int_digits, |h| h.int.len());
        let bound_zeros = high.as_ref().map_or(0, MagnitudeBound::leading_fraction_zeros).max(low.leading_fraction_zeros());
        let mut automaton = DecimalAutomaton {
            low,
            high,
            fraction_cap: fraction_digits.unwrap_or(usize::MAX),
            leading_zero_cap: bound_zeros.max(MAX_DECIMAL_DIGITS),
            memo: HashMap::new(),
            nfa: SmallNfa::default(),
            low_digits: Vec::new(),
            high_digits: Vec::new(),
        };
        let mut starts = Vec::new();
        for length in automaton.low.int.len()..=top_length {
            let is_low_band = length == automaton.low.int.len();
            let is_high_band = automaton.high.as_ref().is_some_and(|h| h.int.len() == length);
            automaton.low_digits = if is_low_band { automaton.low.int.clone() } else { lowest_of_length(length) };
            automaton.high_digits = match (&automaton.high, is_high_band) {
                (Some(h), true) => h.int.clone(),
                _ => vec![9; length],
            };
            // States past both bounds are shared across lengths (see `memo_key`).
            automaton.memo.retain(|state, _| is_free(state));
            let start = DecimalState::Int { length, position: 0, tight_low: is_low_band, tight_high: is_high_band, zero: true };
            starts.extend(automaton.state(start)?);
        }
        automaton
            .nfa
            .lower(sink, &starts, "decimal-digit", MAX_NUMBER_RULES)
            .map_err(|_| too_complex("minimum", "the bounds need too many states"))
    }

    /// The key `state` is remembered by. A fraction state past both bounds with a significant
    /// digit written depends only on how many digits it may still write: such states are one
    /// per count, whatever their position and the integer part's length (as the integer
    /// automaton's free states are), where keyed by position they would be one per position
    /// and count, and the subset construction would have to merge them all again.
    fn memo_key(&self, state: DecimalState) -> DecimalState {
        match state {
            DecimalState::Frac { position, significant, tight_low: false, tight_high: false, after_point } if significant > 0 => {
                let positions_left = self.fraction_cap.saturating_sub(position).min(MAX_DECIMAL_DIGITS);
                let digits_left = positions_left.min(MAX_DECIMAL_DIGITS - significant.min(MAX_DECIMAL_DIGITS));
                DecimalState::Frac { position: FREE - digits_left, significant: 0, tight_low: false, tight_high: false, after_point }
            }
            other => other,
        }
    }

    /// The NFA node of `state`; `None` when no digits from it reach an accepted value.
    fn state(&mut self, state: DecimalState) -> Result<Option<usize>, NumberTooComplex> {
        let key = self.memo_key(state);
        if let Some(found) = self.memo.get(&key) {
            return Ok(*found);
        }
        if self.memo.len() > MAX_NUMBER_RULES {
            return Err(too_complex("minimum", "the bounds need too many states"));
        }
        let mut accepting = false;
        let mut edges: Vec<(u8, usize)> = Vec::new();
        match state {
            DecimalState::Int { length, position, tight_low, tight_high, zero } if position == length => {
                let significant = if zero { 0 } else { length };
                let bare = DecimalState::Frac { position: 0, significant, tight_low, tight_high, after_point: false };
                accepting = self.may_stop(bare);
                let point = DecimalState::Frac { position: 0, significant, tight_low, tight_high, after_point: true };
                if let Some(node) = self.state(point)? {
                    edges.push((b'.', node));
                }
            }
            DecimalState::Int { length, position, tight_low, tight_high, zero } => {
                let min_digit = if tight_low { self.low_digits[position] } else { u8::from(position == 0 && length > 1) };
                let max_digit = if tight_high { self.high_digits[position] } else { 9 };
                for digit in min_digit..=max_digit {
                    let next = DecimalState::Int {
                        length,
                        position: position + 1,
                        tight_low: tight_low && digit == self.low_digits[position],
                        tight_high: tight_high && digit == self.high_digits[position],
                        zero: zero && digit == 0,
                    };
                    if let Some(node) = self.state(next)? {
                        edges.push((b'0' + digit, node));
                    }
                }
            }
            DecimalState::Frac { position, significant, tight_low, tight_high, after_point } => {
                accepting = !after_point && self.may_stop(state);
                if position < self.fraction_cap {
                    let low_digit = if tight_low { self.low.frac.get(position).copied().unwrap_or(0) } else { 0 };
                    let high_digit = match (&self.high, tight_high) {
                        (Some(h), true) => h.frac.get(position).copied().unwrap_or(0),
                        _ => 9,
                    };
                    for digit in low_digit..=high_digit {
                        let leading_zero = significant == 0 && digit == 0;
                        if leading_zero && position >= self.leading_zero_cap {
                            continue;
                        }
                        let significant = if leading_zero { 0 } else { significant + 1 };
                        if significant > MAX_DECIMAL_DIGITS {
                            continue;
                        }
                        let next = DecimalState::Frac {
                            position: position + 1,
                            significant,
                            tight_low: tight_low && digit == low_digit,
                            tight_high: tight_high && digit == high_digit,
                            after_point: false,
                        };
                        if let Some(node) = self.state(next)? {
                            edges.push((b'0' + digit, node));
                        }
                    }
                }
            }
        }
        let node = (accepting || !edges.is_empty()).then(|| self.nfa.node(accepting, edges));
        self.memo.insert(key, node);
        Ok(node)
    }

    /// Whether the number may end here: the digits so far, padded with zeros, are in range.
    fn may_stop(&self, state: DecimalState) -> bool {
        let DecimalState::Frac { position, tight_low, tight_high, .. } = state else {
            return false;
        };
        if tight_low {
            let equal = position >= self.low.frac.len();
            if !equal || self.low.exclusive {
                return false;
            }
        }
        if tight_high {
            if let Some(high) = &self.high {
                let equal = position >= high.frac.len();
                if equal && high.exclusive {
                    return false;
                }
            }
        }
        true
    }
}

fn lowest_of_length(length: usize) -> Vec<u8> {
    let mut digits = vec![0; length];
    if length > 1 {
        digits[0] = 1;
    }
    digits
}
