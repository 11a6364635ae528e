using XfsWin.Cli.Service;
using XfsWin.Control.Protocol;
using XfsWin.Control.Server;
using XfsWin.Control.Transport;
using XfsWin.TestSupport;

[assembly: System.Runtime.Versioning.SupportedOSPlatform("linux")]

namespace XfsWin.Control.Tests;

/// <summary>Volumes made for a test by the real mkfs.xfs and filled by the kernel through loop mounts.</summary>
public static class TestVolumes
{
    /// <summary>A 320 MiB sparse image (mkfs.xfs's minimum is 300 MiB) with <paramref name="label"/>, filled by the kernel.</summary>
    public static string Make(string directory, string name, string label, Action<string>? fill = null)
    {
        var path = Path.Combine(directory, name);
        using (var f = File.Create(path)) f.SetLength(320L << 20);
        Shell.RunChecked("mkfs.xfs", "-q", "-f", "-L", label, path);
        if (fill is not null)
        {
            using var mount = LoopMount.Mount(path, readOnly: false);
            fill(mount.MountPoint);
        }
        return path;
    }

    /// <summary>
    /// An image whose log the kernel left dirty: files written and synced, then more written that live
    /// only in the log when the volume is shut down (xfs_io shutdown -f flushes the log, not the metadata).
    /// </summary>
    public static string MakeDirty(string directory, string name, string label)
    {
        var path = Make(directory, name, label);
        using (var mount = LoopMount.Mount(path, readOnly: false))
        {
            File.WriteAllText(Path.Combine(mount.MountPoint, "before.txt"), "written before the sync\n");
            Shell.RunChecked("sync", "-f", mount.MountPoint);
            var late = Directory.CreateDirectory(Path.Combine(mount.MountPoint, "late")).FullName;
            for (int i = 0; i < 200; i++) File.WriteAllText(Path.Combine(late, $"file{i}"), $"late {i}\n");
            Shell.RunChecked("xfs_io", "-x", "-c", "shutdown -f", mount.MountPoint);
        }
        return path;
    }

    /// <summary>A GPT disk image whose partition 1 (1 MiB in, 330 MiB long) holds an XFS volume labelled <paramref name="label"/>.</summary>
    public static string MakeGptDisk(string directory, string name, string label)
    {
        var disk = Path.Combine(directory, name);
        using (var f = File.Create(disk)) f.SetLength(400L << 20);
        Shell.RunChecked("sgdisk", "-o", "-n", "1:2048:+330M", "-t", "1:8300", "-c", "1:data", disk);
        var part = Path.Combine(directory, name + ".part");
        using (var f = File.Create(part)) f.SetLength(330L << 20);
        Shell.RunChecked("mkfs.xfs", "-q", "-f", "-L", label, part);
        Shell.RunChecked("dd", $"if={part}", $"of={disk}", "bs=1M", "seek=1", "conv=notrunc,sparse", "status=none");
        File.Delete(part);
        return disk;
    }

    /// <summary>Whether <paramref name="directory"/> is a mount point, per the kernel (/proc/self/mountinfo).</summary>
    public static bool IsMountPoint(string directory) =>
        File.ReadAllLines("/proc/self/mountinfo").Any(l => l.Split(' ')[4] == directory);

    public static ShellResult Repair(string image) => Shell.Run("xfs_repair", "-n", image);
}

/// <summary>A control server on a private Unix socket, serving mounts through FUSE in this process.</summary>
public sealed class TestServer : IAsyncDisposable
{
    public string Directory { get; }
    public VolumeManager Volumes { get; }
    public ControlServer Server { get; }
    public StringWriter Log { get; } = new();

    /// <param name="access">
    /// <see cref="ListenerAccess.LocalUsers"/>: the socket is open to every user, in a directory of mode 0755 under /tmp
    /// (the temp directory of root may be private), as the service's is.
    /// </param>
    public TestServer(IReadOnlyList<string> sources, ServerOptions? options = null, ListenerAccess access = ListenerAccess.Private)
    {
        if (access == ListenerAccess.Private)
        {
            Directory = System.IO.Directory.CreateTempSubdirectory("xfswin-control-test.").FullName;
        }
        else
        {
            Directory = System.IO.Directory.CreateDirectory(Path.Combine("/tmp", "xfswin-control-users." + Guid.NewGuid().ToString("N"))).FullName;
            File.SetUnixFileMode(Directory, (UnixFileMode)Convert.ToInt32("755", 8));
        }
        var o = (options ?? new ServerOptions()) with { Sources = sources, ScanDevices = false, HealthPollInterval = TimeSpan.FromMilliseconds(200) };
        Volumes = new VolumeManager(o, new FuseMountBackend(TextWriter.Synchronized(Log)));
        Server = new ControlServer(ControlEndpoint.Listen(Path.Combine(Directory, "control.sock"), access), Volumes, o, l => { lock (Log) Log.WriteLine(l); });
        Server.Start();
    }

    public string Socket => Server.Address;

    public Task<ControlClient> Connect() => ControlClient.ConnectAsync(Socket);

    public async ValueTask DisposeAsync()
    {
        await Server.DisposeAsync();
        Volumes.Dispose();
        try
        {
            System.IO.Directory.Delete(Directory, recursive: true);
        }
        catch (IOException)
        {
        }
    }
}

public static class Events
{
    /// <summary>Waits for an event matching <paramref name="match"/>; fails after a minute (only a broken server takes that long).</summary>
    public static async Task<ControlEvent> WaitFor(ControlClient client, Func<ControlEvent, bool> match)
    {
        using var limit = new CancellationTokenSource(TimeSpan.FromMinutes(1));
        try
        {
            while (true)
            {
                var e = await client.Events.ReadAsync(limit.Token);
                if (match(e)) return e;
            }
        }
        catch (OperationCanceledException)
        {
            throw new Xunit.Sdk.XunitException("the expected event did not come within a minute");
        }
    }
}
