//! Allocation benchmark (written in a later step).
fn main() {}
