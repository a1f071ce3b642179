//! The `weir` binary; everything lives in [`weir_host::cli`].

#[global_allocator]
static ALLOCATOR: weir_host::HostAllocator = weir_host::HostAllocator;

fn main() -> std::process::ExitCode {
    weir_host::cli::main()
}
