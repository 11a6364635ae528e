using XfsWin.Check;

namespace XfsWin.Benchmarks;

/// <summary>
/// The judge of bench/check-agreement.sh: checks the images named on stdin, one path per line, in this one process
/// (so that thousands of checks do not each pay a process start and JIT), and writes one verdict line per image:
/// <c>clean</c>, <c>flagged N FIRST-PROBLEM</c> (what <c>xfswin check</c> exits 1 for), <c>refused ERROR MESSAGE</c> (an
/// XfsException: what the CLI exits with another non-zero code for) or <c>crash TYPE MESSAGE</c> (any other exception:
/// a defect). A hang is the harness's to detect (no line within its time limit).
/// </summary>
internal static class CheckJudge
{
    public static void Run()
    {
        string? line;
        while ((line = Console.ReadLine()) is not null)
        {
            string verdict;
            try
            {
                var report = VolumeChecker.Check(line);
                verdict = report.IsClean ? "clean" : $"flagged {report.ProblemCount} {(report.Problems.Count > 0 ? report.Problems[0] : null)}";
            }
            catch (XfsException e)
            {
                verdict = $"refused {e.Error} {e.Message}";
            }
#pragma warning disable CA1031 // the judge reports every other exception as the defect it is
            catch (Exception e)
#pragma warning restore CA1031
            {
                verdict = $"crash {e.GetType().Name} {e.Message} {e.StackTrace?.Split('\n').FirstOrDefault()?.Trim()}";
            }
            Console.WriteLine(verdict.ReplaceLineEndings(" "));
            Console.Out.Flush();
        }
    }
}
