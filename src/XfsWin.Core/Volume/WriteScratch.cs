using XfsWin.Extents;
using XfsWin.Format;
using XfsWin.Inodes;
using XfsWin.Journal;

namespace XfsWin.Volume;

/// <summary>
/// What one write that allocates works in, reused from write to write: its copy of the inode and the list of the
/// extents it allocates. Taken from <see cref="WriteScratchPool"/> for the length of one write; never shared.
/// </summary>
internal sealed class WriteScratch
{
    public InodeUpdate? Inode;
    public readonly List<BmbtRecord> Fresh = new();

    /// <summary>The working copy of <paramref name="current"/>: the copy this scratch kept, reloaded, or a new one.</summary>
    public InodeUpdate InodeFor(Inode current, Superblock sb) => Inode is { } kept ? kept.Reload(current) : Inode = new InodeUpdate(current, sb);
}

/// <summary>
/// The working state writes reuse: <see cref="WriteScratch"/> objects and the mapping editors of the last files writes
/// allocated in. A write takes what it uses out of the pool and gives it back after its commit, so writes running at
/// the same time never share a scratch or an editor. An editor given back keeps its file's mapping
/// (<see cref="ExtentMapEditor.MarkKept"/>): a later write to that file takes it up again
/// (<see cref="ExtentMapEditor.TryKeep"/>) instead of loading the whole extent list or bmbt, so writes that go from file
/// to file among a few fragmented files (a download of several files, VM disks) load no mapping while no other change
/// moved it.
/// <para>
/// Thread safety: every member may be called from any thread; one leaf lock guards the pool (nothing is taken under it,
/// and no I/O runs under it: an editor loads its mapping after it is taken out).
/// </para>
/// </summary>
internal sealed class WriteScratchPool
{
    /// <summary>How many files' mappings the pool keeps.</summary>
    public const int KeptEditors = 8;

    private readonly object _lock = new();
    private readonly Stack<WriteScratch> _scratch = new();
    // An editor's slot is empty while a write has it out (or before one was ever made for it).
    private readonly ExtentMapEditor?[] _editors = new ExtentMapEditor?[KeptEditors];
    private readonly long[] _used = new long[KeptEditors];
    private long _clock;
    private long _mappingsKept;

    /// <summary>Writes that took up their file's kept mapping instead of loading the fork.</summary>
    public long MappingsKept => Interlocked.Read(ref _mappingsKept);

    public WriteScratch TakeScratch()
    {
        lock (_lock)
            if (_scratch.TryPop(out var scratch)) return scratch;
        return new WriteScratch();
    }

    public void ReturnScratch(WriteScratch scratch)
    {
        lock (_lock) _scratch.Push(scratch);
    }

    /// <summary>
    /// Takes out the editor for a write to <paramref name="update"/>'s file in <paramref name="tx"/>: the one that kept
    /// the file's mapping when nothing changed it since, else one that loads it (a new one for an empty slot, or the
    /// least recently used). Give it back with <see cref="ReturnEditor"/> once the write is over, committed or not.
    /// </summary>
    public ExtentMapEditor TakeEditor(Transaction tx, InodeUpdate update, IFileSpace space)
    {
        ExtentMapEditor? editor;
        lock (_lock)
        {
            int chosen = -1;
            for (int i = 0; i < _editors.Length; i++)
            {
                if (_editors[i] is { } e && e.IsKeptFor(update.Number)) { chosen = i; break; }
                if (chosen < 0 || _editors[chosen] is not null && (_editors[i] is null || _used[i] < _used[chosen])) chosen = i;
            }
            editor = _editors[chosen];
            _editors[chosen] = null;
        }
        if (editor is null) return new ExtentMapEditor(tx, update, space);
        if (!editor.TryKeep(tx, update)) return editor.Reload(tx, update);
        Interlocked.Increment(ref _mappingsKept);
        return editor;
    }

    /// <summary>Gives back an editor <see cref="TakeEditor"/> handed out: into an empty slot, else in place of the least recently used.</summary>
    public void ReturnEditor(ExtentMapEditor editor)
    {
        lock (_lock)
        {
            int chosen = 0;
            for (int i = 0; i < _editors.Length; i++)
            {
                if (_editors[i] is null) { chosen = i; break; }
                if (_used[i] < _used[chosen]) chosen = i;
            }
            _editors[chosen] = editor;
            _used[chosen] = ++_clock;
        }
    }
}
