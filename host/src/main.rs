//! The `weir` binary; everything lives in [`weir_host::cli`].

fn main() -> std::process::ExitCode {
    weir_host::cli::main()
}
