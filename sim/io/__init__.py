"""What a run leaves on disk and on screen: the results folder, the HTML report, plots and the
Chrome trace export. Nothing below this package writes files."""
