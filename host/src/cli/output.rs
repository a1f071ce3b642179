//! What the commands print on standard output, for a reader that may go away.
//!
//! `println!` panics when standard output is a pipe whose reader has exited (`weir jobs |
//! head -1`). [`outln!`] and [`out!`] print the same, and on a closed pipe end the command
//! there, quietly and successfully: nobody is left to read the rest.

use std::io::{ErrorKind, Write};

/// `println!` on standard output, ending the process quietly once its reader has gone.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` on standard output, ending the process quietly once its reader has gone.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write(format_args!($($arg)*))
    };
}

/// Writes `args` to standard output. A closed pipe ends the process with success; any other
/// failure panics, as `print!` does.
pub(crate) fn write(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(args) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => panic!("failed printing to stdout: {e}"),
    }
}
