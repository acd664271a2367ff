<#
.SYNOPSIS
    Remove Nalar's Windows shortcuts, and with -RemoveFiles its folder inside WSL (~/nalar).

.DESCRIPTION
    Settings, conversations and downloaded models live in the distro's ~/.config/nalar, ~/.local/share/nalar
    and ~/.cache/nalar; they stay unless -RemoveUserData is given too.
#>
[CmdletBinding()]
param(
    [string]$Distro = "Ubuntu",
    [switch]$RemoveFiles,
    [switch]$RemoveUserData
)

Set-StrictMode -Version Latest
$ErrorActionPreference = "Stop"
$env:WSL_UTF8 = "1"
$InstallDir = "nalar"

foreach ($folder in @([Environment]::GetFolderPath("Programs"), [Environment]::GetFolderPath("Desktop"))) {
    $link = Join-Path $folder "Nalar.lnk"
    if (Test-Path $link) {
        Remove-Item -Force $link
        Write-Host "removed $link"
    }
}
$iconDir = Join-Path $env:LOCALAPPDATA "Nalar"
if (Test-Path $iconDir) {
    Remove-Item -Recurse -Force $iconDir
    Write-Host "removed $iconDir"
}

if ($RemoveFiles) {
    & wsl.exe -d $Distro -e bash -lc "rm -rf ~/$InstallDir"
    Write-Host "removed ~/$InstallDir in $Distro"
}
if ($RemoveUserData) {
    & wsl.exe -d $Distro -e bash -lc "rm -rf ~/.config/nalar ~/.local/share/nalar ~/.cache/nalar ~/.local/state/nalar"
    Write-Host "removed Nalar's settings, history and models in $Distro"
}
