namespace XfsWin.Journal;

/// <summary>A log sequence number: (cycle &lt;&lt; 32) | block, compared cycle first, then block.</summary>
public static class Lsn
{
    public static ulong Make(uint cycle, uint block) => (ulong)cycle << 32 | block;
    public static uint Cycle(ulong lsn) => (uint)(lsn >> 32);
    public static uint Block(ulong lsn) => (uint)lsn;
    public static int Compare(ulong a, ulong b) => a.CompareTo(b);
    public static string Format(ulong lsn) => $"{Cycle(lsn)}:{Block(lsn)}";
}
