//! The `weir` binary's allocator, for a bench that runs the host in its own process without
//! weighing memory (the ones that weigh it count through the same allocator: `counting`).

#[global_allocator]
static ALLOCATOR: weir_host::HostAllocator = weir_host::HostAllocator;
