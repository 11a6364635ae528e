using System.Globalization;

namespace XfsWin.TestSupport;

/// <summary>The seeds a soak script asks a seeded test to run: an environment variable holding "FIRST [COUNT]".</summary>
public static class SeedRange
{
    /// <summary>The seeds <paramref name="variable"/> names (COUNT defaults to 1), or null when it is unset or empty.</summary>
    public static IEnumerable<int>? FromEnvironment(string variable)
    {
        if (Environment.GetEnvironmentVariable(variable) is not { Length: > 0 } range) return null;
        var parts = range.Split(' ', StringSplitOptions.RemoveEmptyEntries);
        int first = int.Parse(parts[0], CultureInfo.InvariantCulture);
        int count = parts.Length > 1 ? int.Parse(parts[1], CultureInfo.InvariantCulture) : 1;
        return Enumerable.Range(first, count);
    }
}
