using BenchmarkDotNet.Running;

BenchmarkSwitcher.FromAssembly(typeof(XfsWin.Driver.Benchmarks.AdapterBenchmarks).Assembly).Run(args);
