//! Tests of the engine as a whole, across its rooms: limits and bounds every input meets
//! (`bounded`), closing within a token budget (`budget`), and the automaton against a reference
//! recogniser written from the grammar's definition (`reference`). Tests of one room live in that
//! room's own `tests` module.

mod bounded;
mod budget;
mod reference;
