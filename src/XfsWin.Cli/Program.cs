// Minimal dispatch so 'xfswin mount' works on this branch; the command table replaces it.
if (args.Length > 0 && args[0] == "mount")
    return XfsWin.Cli.Commands.MountCommand.Run(args[1..]);
return 0;
