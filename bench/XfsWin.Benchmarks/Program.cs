using BenchmarkDotNet.Running;
using XfsWin.Benchmarks;

if (args.Length > 0 && args[0] == "interleaved")
{
    InterleavedSequentialRead.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 6);
    return;
}
if (args.Length > 0 && args[0] == "lookup-cpu")
{
    LookupCpuTime.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 5);
    return;
}
if (args.Length > 0 && args[0] == "engine-write")
{
    // The engine runs as `xfswin mount` runs its server: every method compiled optimized at once (the mount gives its
    // server DOTNET_TieredCompilation=0; the Native AOT build is compiled ahead). With tiering, methods are still being
    // recompiled on a background thread through the timed run, which then measures the JIT.
    if (Environment.GetEnvironmentVariable("DOTNET_TieredCompilation") is null)
    {
        var psi = new System.Diagnostics.ProcessStartInfo(Environment.ProcessPath!) { UseShellExecute = false };
        foreach (var a in Environment.GetCommandLineArgs().Skip(Environment.ProcessPath!.EndsWith("dotnet", StringComparison.Ordinal) ? 0 : 1))
            psi.ArgumentList.Add(a);
        psi.Environment["DOTNET_TieredCompilation"] = "0";
        using var child = System.Diagnostics.Process.Start(psi)!;
        child.WaitForExit();
        Environment.Exit(child.ExitCode);
    }
    EngineWriteRun.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 20_000,
        args.Length > 2 ? int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture) : 1024);
    return;
}
if (args.Length > 0 && args[0] == "engine-overwrite")
{
    EngineOverwriteRun.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 2,
        args.Length > 2 ? int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture) : 200_000);
    return;
}
if (args.Length > 0 && args[0] == "engine-copy-latency")
{
    EngineCopyLatencyRun.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 1024);
    return;
}
if (args.Length > 0 && args[0] == "engine-append")
{
    EngineAppendRun.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 256);
    return;
}
if (args.Length > 0 && args[0] == "check-judge")
{
    CheckJudge.Run();
    return;
}
BenchmarkSwitcher.FromAssembly(typeof(Program).Assembly).Run(args);
