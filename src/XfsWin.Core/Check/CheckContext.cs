using System.Collections.Concurrent;
using XfsWin.Format;
using XfsWin.Metadata;

namespace XfsWin.Check;

/// <summary>
/// What every part of one check shares: the volume (as read after any in-memory log replay), the
/// problems found so far (thread-safe, bounded) and the block usage map. One per check.
/// </summary>
internal sealed class CheckContext
{
    /// <summary>Problems kept in full; the rest are only counted (a badly damaged volume can yield millions).</summary>
    public const int MaxListedProblems = 10_000;

    private readonly ConcurrentQueue<CheckProblem> _problems = new();
    private int _listed, _notListed;

    public CheckContext(MountContext mount, Superblock sb, bool logReplayed, CancellationToken cancel, bool inUse = false)
    {
        LogReplayed = logReplayed;
        InUse = inUse;
        Mount = mount;
        Sb = sb;
        Cancel = cancel;
        Usage = new BlockUsageMap(sb.AgCount, AgLength, sb.HasReflink);
        Rmaps = new ReverseMappings(sb);
    }

    /// <summary>
    /// The LSN of the log's head (0: unknown, an external log, or a volume in use whose log moves while it is checked).
    /// No V5 metadata block may carry a later one: xfs_repair notes the highest it reads and, when that lies past the
    /// head, would format the log, which counts as damage.
    /// </summary>
    public ulong LogHeadLsn { get; init; }

    /// <summary>
    /// Reports the LSN at <paramref name="lsnOffset"/> of a V5 metadata block when it lies past the log's head. Cycle
    /// and block compare as signed 32-bit numbers, as xfs_repair's tracking of the highest LSN does: an LSN whose cycle
    /// has the top bit set (NULLCOMMITLSN, all ones, among them) is never past the head.
    /// </summary>
    public void CheckLsn(string structure, long byteOffset, ReadOnlySpan<byte> block, int lsnOffset)
    {
        if (!Sb.IsV5 || LogHeadLsn == 0 || block.Length < lsnOffset + 8) return;
        ulong lsn = System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(block[lsnOffset..]);
        int cycle = (int)(lsn >> 32), blk = (int)lsn, headCycle = (int)(LogHeadLsn >> 32), headBlock = (int)LogHeadLsn;
        if (cycle < headCycle || (cycle == headCycle && blk <= headBlock)) return;
        ReportAt(structure, byteOffset, $"LSN {cycle}:{blk} is ahead of the log head {headCycle}:{headBlock} (xfs_repair would format the log)");
    }

    /// <summary>The reverse mappings the structures imply (collected on rmap and reflink volumes).</summary>
    public ReverseMappings Rmaps { get; }

    /// <summary>The superblock's quota and realtime inodes: files whose blocks are never shared (libxfs_internal_inum).</summary>
    public IReadOnlySet<ulong> InternalInodes { get; init; } = new HashSet<ulong>();

    public MountContext Mount { get; }
    /// <summary>The primary superblock as read from the (replayed) device.</summary>
    public Superblock Sb { get; }
    public CancellationToken Cancel { get; }

    /// <summary>
    /// The log was dirty and has been replayed in memory. What the kernel finishes at mount after its
    /// own replay is then expected, not a problem: inodes left on the AGI unlinked lists (open when the
    /// system stopped; the kernel frees them) and copy-on-write staging extents (the kernel drops them).
    /// </summary>
    public bool LogReplayed { get; }

    /// <summary>
    /// The volume is mounted read-write by this process and was quiesced for the check: files unlinked while open are
    /// legitimately on the AGI unlinked lists (freed at their last close), so such inodes are expected.
    /// </summary>
    public bool InUse { get; }

    /// <summary>Inodes with no links left on the AGI unlinked lists are expected (after a replay, or held open while mounted).</summary>
    public bool UnlinkedExpected => LogReplayed || InUse;
    public BlockUsageMap Usage { get; }

    /// <summary>sb_rbmino and sb_rextsize of the primary superblock (the decoded superblock does not keep them).</summary>
    public ulong RealtimeBitmapIno { get; init; }
    public uint RtExtSize { get; init; }

    public uint AgLength(uint agno) =>
        agno == Sb.AgCount - 1 ? (uint)(Sb.DataBlocks - (ulong)agno * Sb.AgBlocks) : Sb.AgBlocks;

    public long AgDaddr(uint agno, uint agbno) => Sb.AgBlockToByte(agno, agbno) >> 9;

    public void Report(string structure, uint? ag, long? daddr, string message)
    {
        if (Interlocked.Increment(ref _listed) <= MaxListedProblems) _problems.Enqueue(new CheckProblem(structure, ag, daddr, message));
        else Interlocked.Increment(ref _notListed);
    }

    public void ReportAt(string structure, long byteOffset, string message)
    {
        uint? ag = null;
        if (byteOffset >= 0 && Sb.AgBlocks > 0)
        {
            ulong block = (ulong)byteOffset >> Sb.BlockLog;
            if (block < Sb.DataBlocks) ag = (uint)(block / Sb.AgBlocks);
        }
        Report(structure, ag, byteOffset >= 0 ? byteOffset >> 9 : null, message);
    }

    public void Report(XfsCorruptionException e) => ReportAt(e.Structure, e.ByteOffset, e.Problem);

    /// <summary>Claims blocks in the usage map and reports a conflict as a problem of <paramref name="structure"/>.</summary>
    public bool Claim(uint agno, uint agbno, uint count, BlockUse use, string structure)
    {
        var conflict = Usage.Claim(agno, agbno, count, use);
        if (conflict is null) return true;
        var (previous, start, n) = conflict.Value;
        Report(structure, agno, AgDaddr(agno, start),
            $"{BlockUsageMap.Describe(use)} at AG block {start}{(n > 1 ? $" (+{n - 1} more)" : "")} is already {BlockUsageMap.Describe(previous)} (block claimed twice)");
        return false;
    }

    public IReadOnlyList<CheckProblem> Problems => _problems.ToArray();

    private readonly ConcurrentQueue<string> _notes = new();

    /// <summary>
    /// Something found that xfs_repair -n reports without counting it as damage (it rebuilds or corrects it on its own
    /// in any repair): listed in the report's notes, not a problem.
    /// </summary>
    public void Note(string note)
    {
        if (_notes.Count < 100) _notes.Enqueue(note);
    }

    public IEnumerable<string> Notes => _notes;
    public int NotListed => Volatile.Read(ref _notListed);

    /// <summary>
    /// Reads raw metadata bytes from the volume as the check sees it (the device after in-memory log
    /// replay). The check verifies what it reads itself and reports failures as problems, so it
    /// bypasses the verified-buffer cache; this is its one path to the device.
    /// </summary>
    public bool TryRead(long byteOffset, Span<byte> into, string structure)
    {
        if (byteOffset < 0 || byteOffset + into.Length > Mount.Device.Length)
        {
            ReportAt(structure, byteOffset, $"address outside the device ({Mount.Device.Length} bytes)");
            return false;
        }
        try
        {
            Mount.Device.Read(byteOffset, into);
            return true;
        }
        catch (IOException e)
        {
            ReportAt(structure, byteOffset, $"read failed: {e.Message}");
            return false;
        }
    }
}
