using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text.RegularExpressions;
using XfsWin.Service;
using XfsWin.TestSupport;
using XfsWin.Tray;

namespace XfsWin.Driver.Tests;

/// <summary>
/// scripts/build-msi.sh run once for this class (publish output and MSI in a directory of this run),
/// then the MSI read back with msiinfo (its tables) and msiextract (its payload).
/// </summary>
public sealed class MsiBuild : IDisposable
{
    public string Directory { get; } = System.IO.Directory.CreateTempSubdirectory("xfswin-msi.").FullName;
    public string Version { get; }
    public string Msi { get; }
    public string Payload => Path.Combine(Directory, "work", "payload");
    public string Extracted => Path.Combine(Directory, "extracted");

    public MsiBuild()
    {
        var props = File.ReadAllText(Path.Combine(OracleImages.RepoRoot, "Directory.Build.props"));
        Version = Regex.Match(props, "<Version>([^<]+)</Version>").Groups[1].Value;
        Shell.RunChecked("bash", [Path.Combine(OracleImages.RepoRoot, "scripts", "build-msi.sh")], TimeSpan.FromMinutes(20),
            new Dictionary<string, string> { ["XFSWIN_MSI_OUT"] = Directory, ["XFSWIN_MSI_WORK"] = Path.Combine(Directory, "work") });
        Msi = Path.Combine(Directory, $"XfsWin-{Version}-x64.msi");
        System.IO.Directory.CreateDirectory(Extracted);
        Shell.RunChecked("msiextract", "-C", Extracted, Msi);
    }

    private readonly Dictionary<string, IReadOnlyList<Dictionary<string, string>>> _tables = [];

    /// <summary>The rows of an MSI table, by column name (msiinfo export: names, types, key line, then rows).</summary>
    public IReadOnlyList<Dictionary<string, string>> Table(string name)
    {
        lock (_tables)
        {
            if (_tables.TryGetValue(name, out var cached)) return cached;
            var lines = Shell.RunChecked("msiinfo", "export", Msi, name).StandardOutput.Split('\n');
            var columns = lines[0].TrimEnd('\r').Split('\t');
            var rows = lines.Skip(3).Where(l => l.Length > 0)
                .Select(l => l.TrimEnd('\r').Split('\t'))
                .Select(cells => columns.Select((c, i) => (c, v: i < cells.Length ? cells[i] : "")).ToDictionary(x => x.c, x => x.v))
                .ToList();
            _tables[name] = rows;
            return rows;
        }
    }

    public string Property(string name) => Table("Property").Single(r => r["Property"] == name)["Value"];

    public void Dispose() => System.IO.Directory.Delete(Directory, recursive: true);
}

public sealed class MsiTests(MsiBuild build) : IClassFixture<MsiBuild>
{
    /// <summary>Never changes: Windows Installer finds the installed XfsWin to upgrade by it.</summary>
    private const string UpgradeCode = "{2DCDC752-3522-4EBB-8BC4-4B71F1ABE327}";

    private const int Component64Bit = 0x100, ComponentRegistryKeyPath = 0x4, ComponentPermanent = 0x10;

    private Dictionary<string, string> FileRow(string id) => build.Table("File").Single(r => r["File"] == id);

    private Dictionary<string, string> ComponentRow(string id) => build.Table("Component").Single(r => r["Component"] == id);

    /// <summary>Where a file lands below C:\Program Files\ ("XfsWin/cli/xfswin.exe"), from the Directory table.</summary>
    private string InstallPath(Dictionary<string, string> file)
    {
        var dirs = build.Table("Directory").ToDictionary(r => r["Directory"]);
        var parts = new List<string> { file["FileName"].Split('|').Last() };
        for (var d = ComponentRow(file["Component_"])["Directory_"]; d != "ProgramFiles64Folder"; d = dirs[d]["Directory_Parent"])
        {
            var name = dirs[d]["DefaultDir"].Split(':').Last().Split('|').Last();
            if (name != ".") parts.Insert(0, name);
        }
        return string.Join('/', parts);
    }

    [Fact]
    public void Every_published_file_is_in_the_msi_byte_for_byte_where_it_belongs()
    {
        // The payload: the service and the tray in XfsWin\, the CLI in XfsWin\cli\.
        var expected = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var (folder, prefix) in new[] { ("app", "XfsWin/"), ("cli", "XfsWin/cli/") })
        {
            var root = Path.Combine(build.Payload, folder);
            foreach (var f in System.IO.Directory.EnumerateFiles(root, "*", SearchOption.AllDirectories))
                expected[prefix + Path.GetRelativePath(root, f).Replace('\\', '/')] = f;
        }
        Assert.Contains("XfsWin/xfswin-service.exe", expected.Keys);
        Assert.Contains("XfsWin/xfswin-tray.exe", expected.Keys);
        Assert.Contains("XfsWin/cli/xfswin.exe", expected.Keys);
        Assert.Contains("XfsWin/coreclr.dll", expected.Keys); // self-contained: the runtime travels along
        Assert.Contains("XfsWin/cli/Microsoft.AspNetCore.dll", expected.Keys);

        var extracted = System.IO.Directory.EnumerateFiles(build.Extracted, "*", SearchOption.AllDirectories)
            .ToDictionary(f => Path.GetRelativePath(build.Extracted, f).Replace('\\', '/'), StringComparer.Ordinal);
        Assert.Equal(expected.Keys.Order(StringComparer.Ordinal), extracted.Keys.Order(StringComparer.Ordinal));
        foreach (var (path, source) in expected)
            Assert.True(SHA256.HashData(File.ReadAllBytes(source)).AsSpan().SequenceEqual(SHA256.HashData(File.ReadAllBytes(extracted[path]))), path);

        // The File table agrees with what was extracted: one row per file, at the same place.
        var files = build.Table("File");
        Assert.Equal(expected.Count, files.Count);
        Assert.Equal(expected.Keys.Order(StringComparer.Ordinal), files.Select(InstallPath).Order(StringComparer.Ordinal));
        // Every component is 64-bit (its registry values land in the 64-bit view) and none outlives the uninstall.
        Assert.All(build.Table("Component"), c =>
        {
            int attributes = int.Parse(c["Attributes"]);
            Assert.True((attributes & Component64Bit) != 0, c["Component"]);
            Assert.True((attributes & ComponentPermanent) == 0, c["Component"]);
        });
    }

    [Theory]
    [InlineData("XfsWin/xfswin-service.exe", 3)] // console subsystem: the SCM starts it without a window
    [InlineData("XfsWin/xfswin-tray.exe", 2)] // Windows GUI subsystem: no console at logon
    [InlineData("XfsWin/cli/xfswin.exe", 3)]
    public void Programs_are_x64_pe32_plus_images(string path, int subsystem)
    {
        var image = File.ReadAllBytes(Path.Combine(build.Extracted, path));
        Assert.Equal("MZ"u8.ToArray(), image[..2]);
        int pe = BinaryPrimitives.ReadInt32LittleEndian(image.AsSpan(0x3C));
        Assert.Equal("PE\0\0"u8.ToArray(), image[pe..(pe + 4)]);
        // COFF header: Machine IMAGE_FILE_MACHINE_AMD64; optional header magic 0x20B (PE32+).
        Assert.Equal(0x8664, BinaryPrimitives.ReadUInt16LittleEndian(image.AsSpan(pe + 4)));
        int optional = pe + 24;
        Assert.Equal(0x20B, BinaryPrimitives.ReadUInt16LittleEndian(image.AsSpan(optional)));
        Assert.Equal(subsystem, BinaryPrimitives.ReadUInt16LittleEndian(image.AsSpan(optional + 68)));
    }

    [Fact]
    public void Service_is_installed_started_at_install_and_stopped_and_removed_at_uninstall()
    {
        var service = Assert.Single(build.Table("ServiceInstall"));
        Assert.Equal("XfsWin", service["Name"]);
        Assert.Equal("16", service["ServiceType"]); // SERVICE_WIN32_OWN_PROCESS
        Assert.Equal("2", service["StartType"]); // SERVICE_AUTO_START
        Assert.Equal("1", service["ErrorControl"]); // SERVICE_ERROR_NORMAL
        Assert.Equal("LocalSystem", service["StartName"]);
        Assert.Equal("", service["Arguments"]); // the SCM starts it without arguments: Program.cs runs the host then
        var component = ComponentRow(service["Component_"]);
        Assert.Equal("xfswin-service.exe", FileRow(component["KeyPath"])["FileName"].Split('|').Last());

        var control = Assert.Single(build.Table("ServiceControl"));
        Assert.Equal("XfsWin", control["Name"]);
        Assert.Equal(service["Component_"], control["Component_"]);
        // msidbServiceControlEvent: Start on install (1), Stop on install (2) and uninstall (0x20), Delete on uninstall (0x80).
        Assert.Equal(0x1 | 0x2 | 0x20 | 0x80, int.Parse(control["Event"]));
        Assert.Equal("1", control["Wait"]);

        var actions = build.Table("InstallExecuteSequence").Select(r => r["Action"]).ToHashSet();
        Assert.Superset(new HashSet<string> { "StopServices", "DeleteServices", "InstallServices", "StartServices" }, actions);
    }

    [Fact]
    public void Launcher_entry_holds_exactly_the_values_LauncherRegistration_writes()
    {
        var rows = build.Table("Registry").Where(r => r["Key"] == LauncherRegistration.KeyPath).ToList();
        Assert.All(rows, r => Assert.Equal("2", r["Root"])); // HKLM
        // Same names and values; the paths are the installed service's (its File id, its folder).
        var expected = LauncherRegistration.Values("/opt/xfswin/xfswin-service.exe");
        Assert.Equal(expected.Select(v => v.Name).Order(), rows.Select(r => r["Name"]).Order());
        var serviceFile = FileRow("XfsWinServiceExe");
        Assert.Equal("XfsWin/xfswin-service.exe", InstallPath(serviceFile));
        foreach (var v in expected)
        {
            var row = rows.Single(r => r["Name"] == v.Name);
            string want = v.Name switch
            {
                "Executable" => "[#XfsWinServiceExe]",
                // [INSTALLDIR] is the service's folder and ends in a backslash, as LauncherRegistration's value does.
                "WorkDirectory" => $"[{ComponentRow(serviceFile["Component_"])["Directory_"]}]",
                _ when v.Kind == RegistryValueKind.DWord => $"#{v.Value}",
                _ => (string)v.Value,
            };
            Assert.Equal(want, row["Value"]);
            Assert.Equal(serviceFile["Component_"], row["Component_"]);
        }
        Assert.Equal("INSTALLDIR", ComponentRow(serviceFile["Component_"])["Directory_"]);
        // The Application log's "XfsWin" source, owned by the same component.
        var source = build.Table("Registry").Single(r => r["Key"] == @"SYSTEM\CurrentControlSet\Services\EventLog\Application\XfsWin");
        Assert.Equal(("2", "EventMessageFile", "[INSTALLDIR]System.Diagnostics.EventLog.Messages.dll"), (source["Root"], source["Name"], source["Value"]));
        Assert.True(File.Exists(Path.Combine(build.Extracted, "XfsWin", "System.Diagnostics.EventLog.Messages.dll")));
    }

    [Fact]
    public void Tray_starts_at_logon_through_the_value_its_menu_toggles()
    {
        var run = build.Table("Registry").Single(r => r["Key"] == StartAtLogon.RunKey);
        Assert.Equal("1", run["Root"]); // HKCU
        Assert.Equal(StartAtLogon.ValueName, run["Name"]);
        // The command line StartAtLogon writes, with the installed tray's path.
        Assert.Equal(StartAtLogon.CommandLine("/opt/xfswin/xfswin-tray.exe").Replace("/opt/xfswin/xfswin-tray.exe", "[#XfsWinTrayExe]", StringComparison.Ordinal), run["Value"]);
        Assert.Equal("XfsWin/xfswin-tray.exe", InstallPath(FileRow("XfsWinTrayExe")));
        // A per-user part has a registry key path, so Windows Installer knows it is installed.
        var component = ComponentRow(run["Component_"]);
        Assert.Equal(run["Registry"], component["KeyPath"]);
        Assert.True((int.Parse(component["Attributes"]) & ComponentRegistryKeyPath) != 0);
        var shortcut = Assert.Single(build.Table("Shortcut"));
        Assert.Equal(("ProgramMenuFolder", "[#XfsWinTrayExe]"), (shortcut["Directory_"], shortcut["Target"]));
    }

    [Fact]
    public void Install_stops_with_a_message_unless_WinFsp_2_is_installed()
    {
        var locators = build.Table("RegLocator").ToDictionary(r => r["Signature_"]);
        var search = build.Table("AppSearch").ToDictionary(r => r["Property"], r => locators[r["Signature_"]]);
        // msidbLocatorTypeRawValue (2) | msidbLocatorType64bit (16): the key path is taken literally, as the driver reads it.
        Assert.Equal(("2", @"SOFTWARE\WOW6432Node\WinFsp", "InstallDir", "18"),
            (search["WINFSPINSTALLDIR"]["Root"], search["WINFSPINSTALLDIR"]["Key"], search["WINFSPINSTALLDIR"]["Name"], search["WINFSPINSTALLDIR"]["Type"]));
        Assert.Equal(("2", @"SOFTWARE\Classes\Installer\Dependencies\WinFsp", "Version", "18"),
            (search["WINFSPVERSION"]["Root"], search["WINFSPVERSION"]["Key"], search["WINFSPVERSION"]["Name"], search["WINFSPVERSION"]["Type"]));
        var condition = build.Table("LaunchCondition").Single(r => r["Condition"].Contains("WINFSP", StringComparison.Ordinal));
        Assert.Equal("Installed OR (WINFSPINSTALLDIR AND WINFSPVERSION >= \"2.\")", condition["Condition"]);
        Assert.Contains("WinFsp 2.x", condition["Description"]);
        Assert.Contains("https://winfsp.dev/rel/", condition["Description"]);
        var sequence = build.Table("InstallExecuteSequence").ToDictionary(r => r["Action"], r => int.Parse(r["Sequence"]));
        Assert.True(sequence["AppSearch"] < sequence["LaunchConditions"]);
        Assert.True(sequence["LaunchConditions"] < sequence["InstallInitialize"]);
    }

    [Fact]
    public void A_newer_version_replaces_an_older_one_and_an_older_one_refuses_to_downgrade()
    {
        Assert.Equal(UpgradeCode, build.Property("UpgradeCode"));
        var upgrade = build.Table("Upgrade");
        Assert.All(upgrade, r => Assert.Equal(UpgradeCode, r["UpgradeCode"]));
        const int OnlyDetect = 0x2;
        var older = upgrade.Single(r => r["ActionProperty"] == "WIX_UPGRADE_DETECTED");
        Assert.Equal(("", build.Version), (older["VersionMin"], older["VersionMax"]));
        Assert.True((int.Parse(older["Attributes"]) & OnlyDetect) == 0); // found and removed
        var newer = upgrade.Single(r => r["ActionProperty"] == "WIX_DOWNGRADE_DETECTED");
        Assert.Equal((build.Version, ""), (newer["VersionMin"], newer["VersionMax"]));
        Assert.True((int.Parse(newer["Attributes"]) & OnlyDetect) != 0);
        Assert.Contains(build.Table("LaunchCondition"), r => r["Condition"] == "NOT WIX_DOWNGRADE_DETECTED");
        var sequence = build.Table("InstallExecuteSequence").ToDictionary(r => r["Action"], r => int.Parse(r["Sequence"]));
        Assert.True(sequence["FindRelatedProducts"] < sequence["LaunchConditions"]);
        Assert.True(sequence.ContainsKey("RemoveExistingProducts"));
        Assert.Contains("WIX_UPGRADE_DETECTED", build.Property("SecureCustomProperties").Split(';'));
    }

    [Fact]
    public void Product_version_is_the_project_version_and_the_package_is_x64_per_machine()
    {
        Assert.Matches(@"^\d+\.\d+\.\d+$", build.Version);
        Assert.Equal(build.Version, build.Property("ProductVersion"));
        Assert.Equal("XfsWin", build.Property("ProductName"));
        Assert.Equal("1", build.Property("ALLUSERS"));
        var summary = Shell.RunChecked("msiinfo", "suminfo", build.Msi).StandardOutput;
        Assert.Contains("Template: x64;1033", summary);
        // The assemblies carry the same version.
        var exe = File.ReadAllBytes(Path.Combine(build.Extracted, "XfsWin", "xfswin-service.dll"));
        Assert.True(exe.AsSpan().IndexOf(System.Text.Encoding.Unicode.GetBytes(build.Version)) >= 0);
    }

    [Fact]
    public void Install_and_uninstall_run_no_program_of_ours_and_touch_nothing_outside_what_they_list()
    {
        // No custom actions: nothing the MSI runs could open, write or unmount a volume; the service's
        // own stop (ServiceControl) unmounts cleanly. Files, registry values and the service are all
        // removed by the standard actions; nothing is created outside the tables checked above.
        Assert.Empty(build.Table("CustomAction"));
        Assert.Empty(build.Table("RemoveFile"));
        Assert.Empty(build.Table("CreateFolder"));
        var roots = build.Table("Registry").Select(r => (r["Root"], r["Key"])).Distinct().Order().ToList();
        Assert.Equal(
            [("1", StartAtLogon.RunKey), ("2", LauncherRegistration.KeyPath), ("2", @"SYSTEM\CurrentControlSet\Services\EventLog\Application\XfsWin")],
            roots);
    }
}
