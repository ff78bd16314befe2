//! Placeholder while being written.
fn main() {}
