using XfsWin.Cli.Commands;
using Xunit;

namespace XfsWin.Cli.Tests;

/// <summary>Where `xfswin mount` on Windows finds SOURCE and the drive letter among the driver's options.</summary>
public class WindowsMountArgumentsTests
{
    [Theory]
    [InlineData(new[] { "img", "X:" }, 0)]
    [InlineData(new[] { "-o", "rw", "img", "X:" }, 2)]
    [InlineData(new[] { "img", "X:", "-o", "rw", "--case-insensitive" }, 0)]
    [InlineData(new[] { "--uid", "1000", "C:\\disk.img", "*", "--rw" }, 2)]
    [InlineData(new[] { "--replay=place", "img", "Y:" }, 1)]
    public void FindsSourceAndDriveLetter(string[] args, int sourceIndex) =>
        Assert.Equal(sourceIndex, MountCommand.WindowsPositionals(args));

    [Theory]
    [InlineData((object)new[] { "img", "/mnt/x" })]
    [InlineData((object)new[] { "-o", "X:" })]
    [InlineData((object)new[] { "--owner", "S-1-5-18", "X:" })]
    public void NoDriveLetterMeansNoWindowsMount(string[] args) =>
        Assert.Null(MountCommand.WindowsPositionals(args));
}
