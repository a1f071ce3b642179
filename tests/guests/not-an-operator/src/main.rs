//! Exports `wasi:cli/run` and nothing of Weir's: `weir validate` must refuse it.

fn main() {
    println!("I am a command, not an operator.");
}
