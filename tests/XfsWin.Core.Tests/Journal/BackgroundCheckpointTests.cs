using System.Text;
using XfsWin.Device;
using XfsWin.Format;
using XfsWin.TestSupport;
using XfsWin.Volume;
using XfsWin.Tests.Volume;
using Xunit;

namespace XfsWin.Tests.Journal;

/// <summary>
/// Checkpoints are written behind the commit that fills the CIL: that commit returns while the checkpoint's records are
/// still on their way to the log, later commits go on into the emptied CIL, a log force waits for the checkpoint, and a
/// checkpoint that fails behind the commits shuts the volume down. The kernel judges the volumes afterwards.
/// </summary>
public sealed class BackgroundCheckpointTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-bgcp-").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    // Generous: only a checkpoint written inside the committing thread (the defect these tests look for) ever waits it out.
    private static readonly TimeSpan Watchdog = TimeSpan.FromSeconds(60);

    /// <summary>
    /// A device over an image that holds some writes at a gate (which ones, each kind says): a held write waits while the
    /// gate is closed (<see cref="WriterWaiting"/> is set once one does). Everything else passes to the image.
    /// </summary>
    private abstract class GatedDevice(IBlockDevice inner, long logStart, long logEnd) : IBlockDevice
    {
        private readonly ManualResetEventSlim _open = new(initialState: true);
        public readonly ManualResetEventSlim WriterWaiting = new();

        public virtual void Close()
        {
            WriterWaiting.Reset();
            _open.Reset();
        }

        protected void OpenGate() => _open.Set();

        /// <summary>Whether a write of <paramref name="length"/> bytes at <paramref name="offset"/> touches the log.</summary>
        protected bool InLog(long offset, int length) => offset < logEnd && offset + length > logStart;

        /// <summary>Waits while the gate is closed.</summary>
        protected void PassGate()
        {
            if (_open.IsSet) return;
            WriterWaiting.Set();
            _open.Wait();
        }

        public long Length => inner.Length;
        public int SectorSize => inner.SectorSize;
        public bool CanWrite => inner.CanWrite;
        public string IoMode => inner.IoMode;
        public void Read(long offset, Span<byte> destination) => inner.Read(offset, destination);
        public ValueTask ReadAsync(long offset, Memory<byte> destination, CancellationToken cancellationToken = default) =>
            inner.ReadAsync(offset, destination, cancellationToken);
        public abstract void Write(long offset, ReadOnlySpan<byte> source);
        protected void WriteThrough(long offset, ReadOnlySpan<byte> source) => inner.Write(offset, source);
        public void Flush() => inner.Flush();

        public void Dispose()
        {
            _open.Set();
            inner.Dispose();
        }
    }

    /// <summary>
    /// Holds writes to the log area at the gate; once it opens they pass, or fail with an I/O error when it opened failing.
    /// </summary>
    private sealed class LogGateDevice(IBlockDevice inner, long logStart, long logEnd) : GatedDevice(inner, logStart, logEnd)
    {
        private volatile bool _fail;

        public void Open(bool failing)
        {
            _fail = failing;
            OpenGate();
        }

        public override void Write(long offset, ReadOnlySpan<byte> source)
        {
            if (InLog(offset, source.Length))
            {
                PassGate();
                if (_fail) throw new IOException("log write failed (test gate)");
            }
            WriteThrough(offset, source);
        }
    }

    /// <summary>A fresh base volume, its device, and the byte range of its internal log.</summary>
    private (string Image, IBlockDevice Raw, long LogStart, long LogEnd) MakeVolume()
    {
        string image = CrashWorkloads.MakeBase(_tmp);
        var raw = FileBlockDevice.Open(image, writable: true);
        var sector = new byte[4096];
        raw.Read(0, sector);
        var sb = Superblock.Decode(sector);
        long logStart = sb.FsbToByte(sb.LogStart);
        return (image, raw, logStart, logStart + (long)sb.LogBlocks * sb.BlockSize);
    }

    private (string Image, LogGateDevice Device) Setup()
    {
        var (image, raw, logStart, logEnd) = MakeVolume();
        return (image, new LogGateDevice(raw, logStart, logEnd));
    }

    private static byte[] N(string s) => Encoding.ASCII.GetBytes(s);

    /// <summary>
    /// Creates files until a commit has taken the CIL as a checkpoint, then waits for that checkpoint's first log write
    /// to reach the closed gate; returns the files created. Fails if a create does not return (its own thread wrote
    /// the checkpoint, and waits at the gate).
    /// </summary>
    private static List<string> CreateUntilACheckpointIsHeld(XfsVolume v, LogGateDevice device, ulong dir)
    {
        var names = new List<string>();
        Exception? failure = null;
        long taken0 = v.LogCheckpointsTaken;
        var creator = new Thread(() =>
        {
            try
            {
                while (v.LogCheckpointsTaken == taken0)
                {
                    string name = $"f{names.Count:D5}";
                    ulong ino = v.CreateNode(dir, N(name), 0x81A4, 0, 0).Inode;
                    v.Write(ino, 0, N("contents of " + name));
                    names.Add(name);
                }
            }
            catch (Exception e)
            {
                failure = e;
            }
        });
        creator.Start();
        bool returned = creator.Join(Watchdog);
        if (!returned) device.Open(failing: false);
        Assert.True(returned, "the create whose commit filled the CIL did not return while the checkpoint's log write waited at the gate");
        Assert.Null(failure);
        Assert.True(device.WriterWaiting.Wait(Watchdog), "the taken checkpoint was never written");
        return names;
    }

    [Fact]
    public void A_commit_that_fills_the_CIL_returns_while_its_checkpoint_is_written_and_a_force_waits_for_it()
    {
        var (image, device) = Setup();
        List<string> first, later = [];
        using (var v = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 64 * 1024 }, ownsDevice: true))
        {
            ulong dir = v.MakeDirectory(v.RootInode, "d"u8, 0x1ED, 0, 0).Inode;
            v.Sync();
            long written0 = v.LogStatistics.Checkpoints;
            device.Close();
            first = CreateUntilACheckpointIsHeld(v, device, dir);
            Assert.True(first.Count > 1, $"{first.Count} create(s) filled the CIL");
            // The checkpoint is taken and not written; reads and further changes go on meanwhile.
            Assert.Equal(written0, v.LogStatistics.Checkpoints);
            Assert.True(v.TryLookup(dir, N(first[^1]), out _));
            for (int i = 0; i < 3; i++)
            {
                string name = $"later{i}";
                v.Write(v.CreateNode(dir, N(name), 0x81A4, 0, 0).Inode, 0, N("contents of " + name));
                later.Add(name);
            }
            // A force waits for the held checkpoint, then writes the one after it.
            Exception? syncFailure = null;
            var syncer = new Thread(() => syncFailure = Record.Exception(v.Sync));
            syncer.Start();
            device.Open(failing: false);
            Assert.True(syncer.Join(Watchdog), "the log force did not return once the gate opened");
            Assert.Null(syncFailure);
            Assert.Equal(v.LogCheckpointsTaken, v.LogStatistics.Checkpoints);
            Assert.True(v.LogStatistics.Checkpoints >= written0 + 2, $"{v.LogStatistics.Checkpoints - written0} checkpoint(s) written");
        }
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            foreach (string name in first.Concat(later))
                Assert.Equal("contents of " + name, File.ReadAllText(Path.Combine(mount.MountPoint, "d", name)));
            Assert.Equal(first.Count + later.Count, Directory.GetFiles(Path.Combine(mount.MountPoint, "d")).Length);
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n: {repair.StandardOutput}{repair.StandardError}");
    }

    [Fact]
    public void A_checkpoint_that_fails_behind_the_commits_shuts_the_volume_down_and_leaves_what_the_kernel_replays()
    {
        var (image, device) = Setup();
        List<string> synced = [];
        var v = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 64 * 1024 }, ownsDevice: true);
        try
        {
            ulong dir = v.MakeDirectory(v.RootInode, "d"u8, 0x1ED, 0, 0).Inode;
            for (int i = 0; i < 5; i++)
            {
                string name = $"synced{i}";
                v.Write(v.CreateNode(dir, N(name), 0x81A4, 0, 0).Inode, 0, N("contents of " + name));
                synced.Add(name);
            }
            v.Sync();
            device.Close();
            CreateUntilACheckpointIsHeld(v, device, dir);
            Assert.False(v.IsReadOnly);
            device.Open(failing: true);
            // The force finds the checkpoint failed (waiting for it, or after): an I/O error, and the volume is shut down.
            var e = Assert.Throws<XfsException>(v.Sync);
            Assert.Equal(XfsError.IoError, e.Error);
            Assert.True(v.IsReadOnly, "the volume still reports itself writable");
            var refused = Record.Exception(() => v.CreateNode(dir, "after"u8, 0x81A4, 0, 0));
            Assert.True(refused is XfsException { Error: XfsError.IoError }, $"a create after the failure: {refused?.GetType().Name}: {refused?.Message}");
            Assert.True(v.TryLookup(dir, N(synced[0]), out _), "reads stop after the shutdown");
        }
        finally
        {
            var closed = Record.Exception(v.Dispose);
            Assert.True(closed is null or XfsException { Error: XfsError.IoError }, $"closing threw {closed?.GetType().Name}: {closed?.Message}");
        }
        // The log holds everything up to the last checkpoint written: the kernel replays it, and what was synced is there.
        using (var mount = LoopMount.Mount(image, readOnly: false))
            foreach (string name in synced)
                Assert.Equal("contents of " + name, File.ReadAllText(Path.Combine(mount.MountPoint, "d", name)));
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n: {repair.StandardOutput}{repair.StandardError}");
    }

    /// <summary>
    /// Holds writes of file data (blocks that begin with "contents of", as every file here does) at a gate, and records
    /// the order in which file data and log writes reached the device.
    /// </summary>
    private sealed class DataGateDevice(IBlockDevice inner, long logStart, long logEnd) : GatedDevice(inner, logStart, logEnd)
    {
        private static readonly byte[] Marker = Encoding.ASCII.GetBytes("contents of ");
        public readonly List<string> Order = [];

        public override void Close()
        {
            lock (Order) Order.Clear();
            base.Close();
        }

        public void Open() => OpenGate();

        public int LogWrites
        {
            get { lock (Order) return Order.Count(o => o == "log"); }
        }

        public override void Write(long offset, ReadOnlySpan<byte> source)
        {
            bool log = InLog(offset, source.Length);
            bool data = !log && source.StartsWith(Marker);
            if (data) PassGate();
            WriteThrough(offset, source);
            if (log || data) lock (Order) Order.Add(log ? "log" : "data");
        }
    }

    /// <summary>
    /// The file data a checkpoint maps is written behind the commit that takes the checkpoint too: that commit returns
    /// while the data waits at the device, and the checkpoint's first record waits for the data (data before the
    /// metadata that exposes it). The kernel then shows every file with its contents.
    /// </summary>
    [Fact]
    public void The_file_data_a_checkpoint_maps_is_written_behind_the_commit_and_before_the_checkpoints_records()
    {
        var (image, raw, logStart, logEnd) = MakeVolume();
        var device = new DataGateDevice(raw, logStart, logEnd);
        var names = new List<string>();
        using (var v = XfsVolume.Open(device, new VolumeOpenOptions { Writable = true, SyncInterval = TimeSpan.Zero, CheckpointThresholdBytes = 64 * 1024 }, ownsDevice: true))
        {
            ulong dir = v.MakeDirectory(v.RootInode, "d"u8, 0x1ED, 0, 0).Inode;
            v.Sync();
            long written0 = v.LogStatistics.Checkpoints;
            long taken0 = v.LogCheckpointsTaken;
            device.Close();
            // A failed check opens the gate, so that closing the volume (which writes the data out) does not hang.
            try
            {
                CheckDataWrittenBehind(v, device, dir, names, taken0, written0);
            }
            finally
            {
                device.Open();
            }
        }
        using (var mount = LoopMount.Mount(image, readOnly: false))
        {
            foreach (string name in names)
                Assert.Equal("contents of " + name, File.ReadAllText(Path.Combine(mount.MountPoint, "d", name)));
            Assert.Equal(names.Count, Directory.GetFiles(Path.Combine(mount.MountPoint, "d")).Length);
        }
        var repair = Shell.Run(OracleImages.Tool("xfs_repair", "6.13"), "-n", image);
        Assert.True(repair.ExitCode == 0, $"xfs_repair -n: {repair.StandardOutput}{repair.StandardError}");
    }

    private static void CheckDataWrittenBehind(XfsVolume v, DataGateDevice device, ulong dir, List<string> names, long taken0, long written0)
    {
        Exception? failure = null;
        var creator = new Thread(() =>
        {
            try
            {
                while (v.LogCheckpointsTaken == taken0)
                {
                    string name = $"f{names.Count:D5}";
                    v.Write(v.CreateNode(dir, N(name), 0x81A4, 0, 0).Inode, 0, N("contents of " + name));
                    names.Add(name);
                }
            }
            catch (Exception e)
            {
                failure = e;
            }
        });
        creator.Start();
        bool returned = creator.Join(Watchdog);
        if (!returned) device.Open();
        Assert.True(returned, "the create whose commit took the checkpoint did not return while the file data waited at the device");
        Assert.Null(failure);
        Assert.True(device.WriterWaiting.Wait(Watchdog), "the checkpoint's file data was never written");
        // The data is held at the gate: no record of the checkpoint may be on its way yet.
        Assert.Equal(0, device.LogWrites);
        Assert.Equal(written0, v.LogStatistics.Checkpoints);
        Assert.True(v.TryLookup(dir, N(names[^1]), out _));
        Assert.True(v.TryLookup(dir, N(names[0]), out ulong firstFile));
        var read = new byte[64];
        int got = v.Read(firstFile, 0, read);
        Assert.Equal("contents of " + names[0], Encoding.ASCII.GetString(read, 0, got));

        Exception? syncFailure = null;
        var syncer = new Thread(() => syncFailure = Record.Exception(v.Sync));
        syncer.Start();
        device.Open();
        Assert.True(syncer.Join(Watchdog), "the sync did not return once the gate opened");
        Assert.Null(syncFailure);
        Assert.True(v.LogStatistics.Checkpoints > written0);
        List<string> order;
        lock (device.Order) order = [.. device.Order];
        int firstLog = order.IndexOf("log");
        Assert.True(firstLog > 0, $"the first write after the data gate closed was a log write ({string.Join(",", order.Take(8))})");
    }
}
