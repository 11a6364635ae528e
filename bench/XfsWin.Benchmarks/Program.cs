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
    EngineWriteRun.Run(args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 20_000,
        args.Length > 2 ? int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture) : 1024);
    return;
}
if (args.Length > 0 && args[0] == "check-judge")
{
    CheckJudge.Run();
    return;
}
BenchmarkSwitcher.FromAssembly(typeof(Program).Assembly).Run(args);
