namespace XfsWin.Fuse;

/// <summary>How a volume is presented through FUSE.</summary>
public sealed record FuseMountOptions
{
    /// <summary>Let users other than the one who mounted see the mount (needs user_allow_other in /etc/fuse.conf when not root).</summary>
    public bool AllowOther { get; init; }

    /// <summary>Let the kernel enforce the permission bits (and POSIX ACLs) itself.</summary>
    public bool DefaultPermissions { get; init; }

    /// <summary>Report this owner for every file instead of the one stored on the volume.</summary>
    public uint? UidOverride { get; init; }

    /// <summary>Report this group for every file instead of the one stored on the volume.</summary>
    public uint? GidOverride { get; init; }

    /// <summary>
    /// Mount read-only (the default). The kernel then keeps file pages across opens (keep_cache) and
    /// the listings of small directories (cache_readdir), since nothing can change them; a read-write
    /// mount keeps neither, so that a change is never hidden behind a cached copy. Writes are served
    /// when the volume was opened read-write (<see cref="XfsWin.Volume.XfsVolume.IsReadOnly"/> is
    /// false); on a read-only volume, opening a file for writing fails with EROFS.
    /// </summary>
    public bool ReadOnly { get; init; } = true;

    /// <summary>
    /// Seconds the kernel may cache attributes. Every change to the volume goes through this mount
    /// (the kernel updates what it caches itself), so long is safe.
    /// </summary>
    public double AttributeTimeout { get; init; } = 3600;

    /// <summary>Seconds the kernel may cache name lookups (positive and negative).</summary>
    public double EntryTimeout { get; init; } = 3600;

    /// <summary>Shown as the mount's source in /proc/mounts (the image or device path).</summary>
    public string FileSystemName { get; init; } = "xfswin";

    /// <summary>libfuse's request trace on stderr.</summary>
    public bool Debug { get; init; }

    /// <summary>Worker threads of the session loop.</summary>
    public int MaxThreads { get; init; } = Math.Max(4, 2 * Environment.ProcessorCount);

    /// <summary>One /dev/fuse descriptor per worker thread.</summary>
    public bool CloneFd { get; init; }

    /// <summary>
    /// Offer readdirplus (entries with their attributes) to the kernel, which then uses it for the
    /// first batch of each listing and whenever lookups follow a listing (ls -l): fewer round trips
    /// for ls -l, but every listing then reads inodes. Off by default: listings read only directory
    /// blocks, like the kernel's XFS, which keeps find and plain listings fast (bench/fuse-vs-kernel.sh
    /// measured find over 100k entries about 3x faster without it).
    /// </summary>
    public bool ReaddirPlus { get; init; }

    /// <summary>
    /// Kernel readahead for the mount, in KiB (the FUSE default is 128). A larger window keeps several
    /// large read requests in flight, served by the worker threads in parallel. Set as root only
    /// (through /sys/class/bdi); 0 leaves the kernel's default.
    /// </summary>
    public int ReadAheadKiB { get; init; } = 4096;

    /// <summary>
    /// Serve through FUSE over io_uring when the kernel offers it (Linux 6.14+, with
    /// /sys/module/fuse/parameters/enable_uring set to Y by root): one queue per CPU, served by a
    /// thread pinned to that CPU, so a request and its answer stay on the caller's CPU. Otherwise,
    /// or when false, requests go through /dev/fuse.
    /// </summary>
    public bool IoUring { get; init; } = true;

    /// <summary>
    /// Ring entries (requests in flight) per io_uring queue. Each has a payload buffer of the largest
    /// request size (1 MiB, committed only as it is used); large reads are served concurrently.
    /// </summary>
    public int IoUringQueueDepth { get; init; } = 4;

    /// <summary>Tests only: this io_uring queue fails after FUSE_INIT, as if its buffers could not be allocated.</summary>
    internal int IoUringQueueFailingForTests { get; init; } = -1;

    /// <summary>
    /// Tests only: an io_uring queue that fails once the ring is live, as if its io_uring_enter
    /// returned an error, each time it has served some more requests (see <see cref="IoUringLiveFault"/>).
    /// </summary>
    internal IoUringLiveFault? IoUringLiveFaultForTests { get; init; }

    /// <summary>Extra mount options passed to libfuse as they are (e.g. "max_read=131072").</summary>
    public IReadOnlyList<string> ExtraOptions { get; init; } = [];
}

/// <summary>
/// Tests only: queue <paramref name="Queue"/> fails after serving <paramref name="AfterRequests"/>
/// requests through the live ring, and again after as many more, <paramref name="Times"/> times in all.
/// <paramref name="Undrainable"/>: the failed ring's io_uring_enter keeps failing, so that it cannot
/// be drained before it is closed.
/// </summary>
internal sealed record IoUringLiveFault(int Queue, int AfterRequests, int Times, bool Undrainable = false);
